// main() of a replayer executable. Compiled once per backend, with
// HEAPLAB_BACKEND_HEADER (the backend's header in allocators/) and
// HEAPLAB_BACKEND (its type) defined by heaplab_replayer() in
// replay/CMakeLists.txt.
#include "replay/replayer.h"

#include HEAPLAB_BACKEND_HEADER

int main(int argc, char** argv) { return heaplab::replay::backend_main<HEAPLAB_BACKEND>(argc, argv); }
