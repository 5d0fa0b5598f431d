#include "lockstep/parallel/zero/init.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "lockstep/util/error.h"

namespace lockstep::parallel {

namespace {
constexpr int64_t kPage = 4096;

// The scratch file: closed when the scope and the last mapping are gone.
struct File {
  int fd = -1;
  std::string dir;
  ~File() {
    if (fd >= 0) ::close(fd);
  }
};

struct Region {
  void* data;
  size_t bytes;
};
}  // namespace

struct ZeroInit::State {
  std::shared_ptr<File> file;
  int64_t end = 0;  // bytes of the file in use
  int64_t count = 0;
  int64_t bytes = 0;
  // The mappings made in this scope that may hold pages (weak: a parameter may go before the scope).
  std::vector<std::pair<std::weak_ptr<Storage>, Region>> regions;

  void dropPages() {
    for (auto& [storage, r] : regions) {
      if (!storage.expired()) ::madvise(r.data, r.bytes, MADV_DONTNEED);  // the file keeps the values
    }
    std::erase_if(regions, [](const auto& e) { return e.first.expired(); });
  }

  void move(autograd::Variable& v) {
    const Tensor t = v.tensor();
    if (!t.device().isCpu() || t.numel() == 0 || !isFloating(t.dtype())) return;
    dropPages();  // the parameters registered before this one are done (or written again later)
    const Tensor src = t.contiguous();
    const size_t n = src.nbytes();
    const int64_t span = (static_cast<int64_t>(n) + kPage - 1) / kPage * kPage;
    const int err = ::posix_fallocate(file->fd, end, span);
    LOCKSTEP_ENFORCE(err == 0, IoError, "zero.Init: cannot reserve ", span,
                     " more bytes for the parameters in '", file->dir, "': ", std::strerror(err),
                     err == ENOSPC ? " (free space there or choose another directory)" : "");
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, file->fd, end);
    LOCKSTEP_ENFORCE(p != MAP_FAILED, IoError, "zero.Init: cannot map the parameters' file in '", file->dir,
                     "': ", std::strerror(errno));
    end += span;
    std::memcpy(p, src.dataPtr(), n);
    std::shared_ptr<File> keep = file;
    Tensor mapped = Tensor::fromBlob(p, t.shape(), t.dtype(), [keep, n](void* q) { ::munmap(q, n); });
    v.tensor() = mapped;
    regions.push_back({mapped.storage(), {p, n}});
    ++count;
    bytes += static_cast<int64_t>(n);
  }
};

ZeroInit::ZeroInit(const std::string& dir) : state_(std::make_shared<State>()) {
  std::string where = dir;
  if (where.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    where = tmp && *tmp ? tmp : "/tmp";
  }
  std::string templ = where + (where.back() == '/' ? "" : "/") + "lockstep-zero-init-" +
                      std::to_string(::getpid()) + "-XXXXXX";
  state_->file = std::make_shared<File>();
  state_->file->dir = where;
  state_->file->fd = ::mkostemp(templ.data(), O_CLOEXEC);
  LOCKSTEP_ENFORCE(state_->file->fd >= 0, IoError, "zero.Init: cannot create the parameters' file in '",
                   where, "': ", std::strerror(errno), " (the directory must exist and be writable)");
  ::unlink(templ.c_str());  // gone with the last mapping and descriptor, however the process ends
  std::weak_ptr<State> weak = state_;
  previous_ = nn::setParameterRegisteredHook([weak](autograd::Variable& v) {
    if (auto s = weak.lock()) s->move(v);
  });
}

ZeroInit::~ZeroInit() {
  nn::setParameterRegisteredHook(std::move(previous_));
  state_->dropPages();
}

int64_t ZeroInit::parameters() const { return state_->count; }

int64_t ZeroInit::bytes() const { return state_->bytes; }

}  // namespace lockstep::parallel
