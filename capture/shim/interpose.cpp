// The override layer: every allocation entry point of C and C++, each a
// one-line forward to its hook (hooks.h). Nothing else lives here.
#include <errno.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <new>

#include "capture/shim/hooks.h"

using heaplab::shim::Op;
namespace s = heaplab::shim;

#define HEAPLAB_EXPORT extern "C" __attribute__((visibility("default")))
#define HEAPLAB_OPERATOR __attribute__((visibility("default")))

HEAPLAB_EXPORT void* malloc(size_t n) { return s::hook_malloc(n); }
HEAPLAB_EXPORT void* calloc(size_t count, size_t n) { return s::hook_calloc(count, n); }
HEAPLAB_EXPORT void* realloc(void* p, size_t n) { return s::hook_realloc(p, n); }
HEAPLAB_EXPORT void* reallocarray(void* p, size_t count, size_t n) { return s::hook_reallocarray(p, count, n); }
HEAPLAB_EXPORT void free(void* p) { s::hook_free(p); }
HEAPLAB_EXPORT void* memalign(size_t align, size_t n) { return s::hook_memalign(align, n); }
HEAPLAB_EXPORT int posix_memalign(void** out, size_t align, size_t n) { return s::hook_posix_memalign(out, align, n); }
HEAPLAB_EXPORT void* aligned_alloc(size_t align, size_t n) { return s::hook_aligned_alloc(align, n); }
HEAPLAB_EXPORT void* valloc(size_t n) { return s::hook_valloc(n); }
HEAPLAB_EXPORT pid_t _Fork(void) { return s::hook_fork_without_handlers(); }
#if defined(__x86_64__)
// syscall(2) in assembly, so that no frame of the shim's is in the way: a
// clone that is not a fork on this stack (SYS_clone or SYS_clone3 with a
// stack of its own, or sharing memory) is made here exactly as glibc makes
// it (its child resumes on its new stack at the `ret`); every other call
// jumps to the hook, whose seven arguments are in the same registers and
// stack slot as syscall's (56 SYS_clone, 435 SYS_clone3; 0x94500 CLONE_VM |
// CLONE_FILES | CLONE_VFORK | CLONE_THREAD | CLONE_SETTLS: shim.cpp's kSharing, checked
// there; struct clone_args: flags at 0, stack at 40). A new process on a
// stack of its own (sharing nothing) runs the fork child handler first, on
// a static stack (the child's private copy: it has one thread; the stack it
// was given may be small), then returns on its own stack as without the shim.
extern "C" {
__attribute__((visibility("hidden"), used)) long heaplab_syscall_hook(long n, long a0, long a1, long a2, long a3,
                                                                      long a4, long a5) {
  return s::hook_syscall(n, a0, a1, a2, a3, a4, a5);
}
__attribute__((visibility("hidden"), used)) long heaplab_syscall_failed(long r) {
  errno = int(-r);
  return -1;
}
__attribute__((visibility("hidden"), used)) void heaplab_clone_child_hook() { s::hook_clone_child(); }
__attribute__((visibility("hidden"), used)) void* heaplab_clone_rsp;
}
asm(R"(
  .macro heaplab_raw_syscall  # syscall(2)'s arguments into the kernel's registers, and the call
  movq %rdi, %rax
  movq %rsi, %rdi
  movq %rdx, %rsi
  movq %rcx, %rdx
  movq %r8, %r10
  movq %r9, %r8
  movq 8(%rsp), %r9
  syscall
  .endm
  .pushsection .text
  .p2align 4
  .globl syscall
  .type syscall, @function
syscall:
  .cfi_startproc
  endbr64
  cmpq $56, %rdi
  je 1f
  cmpq $435, %rdi
  je 4f
  jmp heaplab_syscall_hook
1:
  testl $0x94500, %esi
  jnz 2f
  testq %rdx, %rdx
  jnz 5f
  jmp heaplab_syscall_hook
4:
  testq %rsi, %rsi
  jz 2f
  cmpq $48, %rdx
  jb 2f
  testl $0x94500, (%rsi)
  jnz 2f
  cmpq $0, 40(%rsi)
  jne 5f
  jmp heaplab_syscall_hook
2:
  heaplab_raw_syscall
  cmpq $-4095, %rax
  jae 3f
  ret
3:
  movq %rax, %rdi
  jmp heaplab_syscall_failed
5:
  heaplab_raw_syscall
  testq %rax, %rax
  jnz 6f
  .cfi_remember_state
  .cfi_undefined %rip
  movq %rsp, heaplab_clone_rsp(%rip)
  leaq heaplab_clone_stack+65536(%rip), %rsp
  call heaplab_clone_child_hook
  movq heaplab_clone_rsp(%rip), %rsp
  .cfi_restore_state
  xorl %eax, %eax
  ret
6:
  cmpq $-4095, %rax
  jae 3b
  ret
  .cfi_endproc
  .size syscall, .-syscall
  .popsection
)");
#else
// (glibc reads all six arguments whatever the call: so do these.)
HEAPLAB_EXPORT long syscall(long n, ...) {
  va_list ap;
  va_start(ap, n);
  long a[6];
  for (long& x : a) x = va_arg(ap, long);
  va_end(ap);
  return s::hook_syscall(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}
#endif
HEAPLAB_EXPORT int clone(int (*fn)(void*), void* stack, int flags, void* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  void* ptid = va_arg(ap, void*);
  void* tls = va_arg(ap, void*);
  void* ctid = va_arg(ap, void*);
  va_end(ap);
  return s::hook_clone(fn, stack, flags, arg, ptid, tls, ctid);
}
HEAPLAB_EXPORT void* pvalloc(size_t n) { return s::hook_pvalloc(n); }

// The program's own memory (memory.h): the caller tells the program's calls
// from the allocator's.
#define CALLER __builtin_return_address(0)
HEAPLAB_EXPORT void* mmap(void* a, size_t n, int prot, int flags, int fd, off_t off) {
  return s::hook_mmap(a, n, prot, flags, fd, off, CALLER);
}
HEAPLAB_EXPORT void* mmap64(void* a, size_t n, int prot, int flags, int fd, off_t off) {
  return s::hook_mmap(a, n, prot, flags, fd, off, CALLER);
}
HEAPLAB_EXPORT int munmap(void* a, size_t n) { return s::hook_munmap(a, n, CALLER); }
HEAPLAB_EXPORT void* mremap(void* old, size_t old_n, size_t n, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  void* fixed = (flags & MREMAP_FIXED) ? va_arg(ap, void*) : nullptr;
  va_end(ap);
  return s::hook_mremap(old, old_n, n, flags, fixed, CALLER);
}
HEAPLAB_EXPORT int madvise(void* a, size_t n, int advice) { return s::hook_madvise(a, n, advice, CALLER); }
HEAPLAB_EXPORT int brk(void* a) { return s::hook_brk(a, CALLER); }
HEAPLAB_EXPORT void* sbrk(intptr_t n) { return s::hook_sbrk(n, CALLER); }
#undef CALLER

using std::align_val_t;
using std::nothrow_t;
using std::size_t;
#define A(a) static_cast<size_t>(a)

HEAPLAB_OPERATOR void* operator new(size_t n) { return s::hook_new(Op::op_new, n, 0, nullptr); }
HEAPLAB_OPERATOR void* operator new[](size_t n) { return s::hook_new(Op::op_new_array, n, 0, nullptr); }
HEAPLAB_OPERATOR void* operator new(size_t n, const nothrow_t& nt) noexcept {
  return s::hook_new(Op::op_new_nothrow, n, 0, &nt);
}
HEAPLAB_OPERATOR void* operator new[](size_t n, const nothrow_t& nt) noexcept {
  return s::hook_new(Op::op_new_array_nothrow, n, 0, &nt);
}
HEAPLAB_OPERATOR void* operator new(size_t n, align_val_t a) {
  return s::hook_new(Op::op_new_aligned, n, A(a), nullptr);
}
HEAPLAB_OPERATOR void* operator new[](size_t n, align_val_t a) {
  return s::hook_new(Op::op_new_array_aligned, n, A(a), nullptr);
}
HEAPLAB_OPERATOR void* operator new(size_t n, align_val_t a, const nothrow_t& nt) noexcept {
  return s::hook_new(Op::op_new_aligned_nothrow, n, A(a), &nt);
}
HEAPLAB_OPERATOR void* operator new[](size_t n, align_val_t a, const nothrow_t& nt) noexcept {
  return s::hook_new(Op::op_new_array_aligned_nothrow, n, A(a), &nt);
}

HEAPLAB_OPERATOR void operator delete(void* p) noexcept { s::hook_delete(Op::op_delete, p, 0, 0, nullptr); }
HEAPLAB_OPERATOR void operator delete[](void* p) noexcept { s::hook_delete(Op::op_delete_array, p, 0, 0, nullptr); }
HEAPLAB_OPERATOR void operator delete(void* p, size_t n) noexcept {
  s::hook_delete(Op::op_delete_sized, p, n, 0, nullptr);
}
HEAPLAB_OPERATOR void operator delete[](void* p, size_t n) noexcept {
  s::hook_delete(Op::op_delete_array_sized, p, n, 0, nullptr);
}
HEAPLAB_OPERATOR void operator delete(void* p, align_val_t a) noexcept {
  s::hook_delete(Op::op_delete_aligned, p, 0, A(a), nullptr);
}
HEAPLAB_OPERATOR void operator delete[](void* p, align_val_t a) noexcept {
  s::hook_delete(Op::op_delete_array_aligned, p, 0, A(a), nullptr);
}
HEAPLAB_OPERATOR void operator delete(void* p, size_t n, align_val_t a) noexcept {
  s::hook_delete(Op::op_delete_sized_aligned, p, n, A(a), nullptr);
}
HEAPLAB_OPERATOR void operator delete[](void* p, size_t n, align_val_t a) noexcept {
  s::hook_delete(Op::op_delete_array_sized_aligned, p, n, A(a), nullptr);
}
HEAPLAB_OPERATOR void operator delete(void* p, const nothrow_t& nt) noexcept {
  s::hook_delete(Op::op_delete_nothrow, p, 0, 0, &nt);
}
HEAPLAB_OPERATOR void operator delete[](void* p, const nothrow_t& nt) noexcept {
  s::hook_delete(Op::op_delete_array_nothrow, p, 0, 0, &nt);
}
HEAPLAB_OPERATOR void operator delete(void* p, align_val_t a, const nothrow_t& nt) noexcept {
  s::hook_delete(Op::op_delete_aligned_nothrow, p, 0, A(a), &nt);
}
HEAPLAB_OPERATOR void operator delete[](void* p, align_val_t a, const nothrow_t& nt) noexcept {
  s::hook_delete(Op::op_delete_array_aligned_nothrow, p, 0, A(a), &nt);
}
