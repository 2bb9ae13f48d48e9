// The overhead benchmark's program: T threads each churn a std::map of
// std::string keys and values (insert, look up, erase), the allocation
// pattern of many C++ services. Prints a checksum so the work is not elided.
// With WAVES, the threads are started and joined that many times over (a
// program whose threads come and go: WAVES x THREADS threads in all).
// With IDLE, that many more threads each make 100 strings, then wait
// without a call until the churning threads are done (a server's idle
// pool).
//   churn [THREADS=2] [OPS_PER_THREAD=2000000] [LIVE=20000] [WAVES=1] [IDLE=0]
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  long ops = argc > 2 ? std::atol(argv[2]) : 2000000;
  long live = argc > 3 ? std::atol(argv[3]) : 20000;
  int waves = argc > 4 ? std::atoi(argv[4]) : 1;
  int idle = argc > 5 ? std::atoi(argv[5]) : 0;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::vector<std::thread> idlers;
  std::vector<size_t> made(static_cast<size_t>(idle));
  for (int t = 0; t < idle; ++t)
    idlers.emplace_back([&, t] {
      std::vector<std::string> v;
      for (int i = 0; i < 100; ++i) v.emplace_back(std::string(40 + i, 'i'));
      made[size_t(t)] = v.size();
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return done; });
    });
  std::vector<uint64_t> sums(static_cast<size_t>(threads));
  uint64_t total = 0;
  for (int w = 0; w < waves; ++w) {
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        std::map<std::string, std::string> m;
        uint64_t x = 88172645463325252ull + uint64_t(w) * uint64_t(threads) + uint64_t(t), sum = 0;
        for (long i = 0; i < ops; ++i) {
          x ^= x << 13;
          x ^= x >> 7;
          x ^= x << 17;
          std::string key = "key-" + std::to_string(x % uint64_t(live)) + "-padding-to-the-heap";
          auto it = m.find(key);
          if (it == m.end()) {
            m.emplace(std::move(key), std::string(16 + x % 200, 'v'));
          } else {
            sum += it->second.size();
            m.erase(it);
          }
        }
        sums[size_t(t)] = sum + m.size();
      });
    for (auto& t : ts) t.join();
    for (uint64_t s : sums) total += s;
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  for (auto& t : idlers) t.join();
  for (size_t m : made) total += m;
  std::printf("%llu\n", static_cast<unsigned long long>(total));
  return 0;
}
