//===- Parallel.cpp - Host work spread over threads -----------------------===//

#include "runtime/core/Parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace dhs::runtime {

namespace {

/// True on the pool's own threads (a parallelFor from inside a body runs on
/// its calling thread alone).
thread_local bool onPoolThread = false;

/// Threads started once and kept: a step's host work calls parallelFor
/// several times a step (the groups' appends, adoption), where starting
/// threads each time would cost as much as the work. One job at a time; the
/// caller works on it too and never waits for a helper that has not begun,
/// so a job finishes even where no helper could be started.
class WorkerPool {
public:
  static WorkerPool &instance() {
    static WorkerPool pool;
    return pool;
  }

  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread &thread : threads_)
      thread.join();
  }

  /// Runs `job` on the calling thread and on up to `helpers` pool threads
  /// (each calls it once), and returns once every call has returned; false,
  /// running nothing, when the pool is busy with another job or the caller
  /// is a pool thread.
  bool run(unsigned helpers, const std::function<void()> &job) {
    if (onPoolThread)
      return false;
    std::unique_lock<std::mutex> jobLock(jobMutex_, std::try_to_lock);
    if (!jobLock.owns_lock())
      return false;
    startThreads(helpers);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      wanted_ = std::min<std::size_t>(helpers, threads_.size());
    }
    wake_.notify_all();
    job();
    std::unique_lock<std::mutex> lock(mutex_);
    // Helpers that have not begun by now would find no work left.
    wanted_ = 0;
    done_.wait(lock, [&] { return running_ == 0; });
    job_ = nullptr;
    return true;
  }

private:
  WorkerPool() = default;

  /// Starts threads up to `count`, at most hardwareThreads() - 1 (under
  /// jobMutex_); one that cannot be started leaves its share to the others.
  void startThreads(unsigned count) {
    count = std::min(count, hardwareThreads() - 1);
    try {
      while (threads_.size() < count)
        threads_.emplace_back([this] { work(); });
    } catch (...) {
    }
  }

  void work() {
    onPoolThread = true;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || wanted_ > 0; });
      if (stopping_)
        return;
      --wanted_;
      ++running_;
      const std::function<void()> *job = job_;
      lock.unlock();
      (*job)();
      lock.lock();
      if (--running_ == 0)
        done_.notify_all();
    }
  }

  std::mutex jobMutex_; ///< held by the caller of the job running
  std::mutex mutex_;    ///< guards what follows
  std::condition_variable wake_, done_;
  const std::function<void()> *job_ = nullptr;
  std::size_t wanted_ = 0;  ///< helpers still to join the job
  std::size_t running_ = 0; ///< helpers in the job
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

} // namespace

unsigned hardwareThreads() { return std::max(1u, std::thread::hardware_concurrency()); }

void parallelFor(std::int64_t count, std::int64_t grain, unsigned threads,
                 const std::function<void(std::int64_t begin, std::int64_t end)> &body) {
  if (count <= 0)
    return;
  grain = std::max<std::int64_t>(grain, 1);
  const std::int64_t chunks = (count + grain - 1) / grain;
  if (threads == 0)
    threads = hardwareThreads();
  threads = static_cast<unsigned>(std::min<std::int64_t>(threads, chunks));
  if (threads <= 1) {
    body(0, count);
    return;
  }
  std::atomic<std::int64_t> next{0};
  std::mutex failureMutex;
  std::exception_ptr failure;
  const std::function<void()> worker = [&] {
    try {
      for (;;) {
        const std::int64_t chunk = next.fetch_add(1);
        if (chunk >= chunks)
          return;
        const std::int64_t begin = chunk * grain;
        body(begin, std::min(count, begin + grain));
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(failureMutex);
      if (!failure)
        failure = std::current_exception();
      // The other threads take no further chunk.
      next.store(chunks);
    }
  };
  // Busy pool (another thread's parallelFor, or one inside a body): this
  // thread alone, in one call.
  if (!WorkerPool::instance().run(threads - 1, worker)) {
    body(0, count);
    return;
  }
  if (failure)
    std::rethrow_exception(failure);
}

} // namespace dhs::runtime
