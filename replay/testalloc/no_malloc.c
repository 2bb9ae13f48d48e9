/* A shared library that is not an allocator: it defines no malloc. */
int heaplab_test_not_an_allocator(int x) { return x + 1; }
