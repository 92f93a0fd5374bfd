#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <new>

#include "slipway/core.h"

namespace slipway {
namespace {

std::string errno_text() { return std::strerror(errno); }

// Closes a file descriptor on scope exit.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

Status fsync_directory(const std::string& directory) {
  FileDescriptor dir(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) return io_error("cannot open folder '" + directory + "': " + errno_text());
  if (::fsync(dir.get()) != 0) return io_error("cannot sync folder '" + directory + "': " + errno_text());
  return {};
}

}  // namespace

Result<MappedFile> MappedFile::open(const std::string& path) {
  FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) return io_error("cannot open '" + path + "': " + errno_text());
  struct stat info {};
  if (::fstat(file.get(), &info) != 0) return io_error("cannot stat '" + path + "': " + errno_text());
  if (S_ISDIR(info.st_mode)) return invalid_argument("'" + path + "' is a folder, not a file");
  MappedFile mapped;
  mapped.size_ = static_cast<std::size_t>(info.st_size);
  if (mapped.size_ == 0) return mapped;
  void* address = ::mmap(nullptr, mapped.size_, PROT_READ, MAP_PRIVATE, file.get(), 0);
  if (address == MAP_FAILED) return io_error("cannot map '" + path + "': " + errno_text());
  ::madvise(address, mapped.size_, MADV_SEQUENTIAL);
  mapped.address_ = address;
  return mapped;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : address_(std::exchange(other.address_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (address_ != nullptr) ::munmap(address_, size_);
    address_ = std::exchange(other.address_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::advise_normal_access() const {
  if (address_ != nullptr) ::madvise(address_, size_, MADV_NORMAL);
}

MappedFile::~MappedFile() {
  if (address_ != nullptr) ::munmap(address_, size_);
}

namespace {
// Under AddressSanitizer the buffer comes from the heap, so reads past its end are still caught
// (ASan does not watch anonymous mappings).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kFromHeap = true;
#else
constexpr bool kFromHeap = false;
#endif
constexpr std::align_val_t kHeapAlignment{64};
}  // namespace

HugePageBuffer::HugePageBuffer(std::size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  if (bytes > static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max())) throw std::bad_alloc();
  if constexpr (kFromHeap) {
    address_ = ::operator new(bytes, kHeapAlignment);
    std::memset(address_, 0, bytes);
    return;
  }
  constexpr std::size_t kHugePage = std::size_t{2} << 20;
  // Over-mapped by a huge page, then trimmed, so the buffer starts on a huge-page boundary (the
  // kernel backs only whole aligned 2 MiB ranges with huge pages).
  // No overflow: bytes is at most PTRDIFF_MAX, checked above.
  const std::size_t whole = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* mapped = ::mmap(nullptr, whole + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  auto* base = static_cast<std::byte*>(mapped);
  const std::size_t lead = (kHugePage - reinterpret_cast<std::uintptr_t>(mapped) % kHugePage) % kHugePage;
  std::byte* aligned = base + lead;
  if (lead > 0) ::munmap(base, lead);
  ::munmap(aligned + whole, kHugePage - lead);  // the rest of the extra huge page (never empty)
  address_ = aligned;
  mapped_ = whole;
  // Refused (EINVAL) where the kernel has no transparent huge pages: small pages then.
  ::madvise(address_, mapped_, MADV_HUGEPAGE);
}

HugePageBuffer::HugePageBuffer(HugePageBuffer&& other) noexcept
    : address_(std::exchange(other.address_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

void HugePageBuffer::release() {
  if (address_ == nullptr) return;
  if constexpr (kFromHeap) {
    ::operator delete(address_, kHeapAlignment);
  } else {
    ::munmap(address_, mapped_);
  }
}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  if (this != &other) {
    release();
    address_ = std::exchange(other.address_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

HugePageBuffer::~HugePageBuffer() { release(); }

bool HugePageBuffer::commit() {
  if (kFromHeap || address_ == nullptr) return true;  // the heap's memory is written already
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14; older headers lack the name
#endif
  if (::madvise(address_, mapped_, MADV_POPULATE_WRITE) == 0) return true;
  if (errno == ENOMEM || errno == EFAULT) return false;  // the pages cannot be had
  // A kernel before 5.14 (EINVAL) or a sandbox that refuses the advice: one write per page does
  // the same, each byte written back as it is.
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  auto* bytes = static_cast<volatile std::byte*>(address_);
  for (std::size_t at = 0; at < mapped_; at += page) bytes[at] = bytes[at];
  return true;
}

namespace {

// The first number in a file, if it starts with one (a cgroup's "max" does not).
std::optional<std::uint64_t> number_in(const std::string& path) {
  std::ifstream file(path);
  std::uint64_t number = 0;
  if (file >> number) return number;
  return std::nullopt;
}

}  // namespace

std::optional<std::uint64_t> available_memory_bytes() {
  std::optional<std::uint64_t> available;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemAvailable:") {
      available = kib * 1024;
      break;
    }
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  std::ifstream cgroups("/proc/self/cgroup");
  auto within = [&](const std::string& limit_file, const std::string& used_file) {
    const auto limit = number_in(limit_file), used = number_in(used_file);
    if (limit && used) available = std::min(available.value_or(UINT64_MAX), *limit - std::min(*limit, *used));
  };
  for (std::string line; std::getline(cgroups, line);) {
    if (line.starts_with("0::")) {  // the unified (v2) hierarchy
      const std::string directory = "/sys/fs/cgroup" + line.substr(3);
      within(directory + "/memory.max", directory + "/memory.current");
    } else if (const std::size_t at = line.find(":memory:"); at != std::string::npos) {  // v1's memory controller
      const std::string directory = "/sys/fs/cgroup/memory" + line.substr(at + 8);
      within(directory + "/memory.limit_in_bytes", directory + "/memory.usage_in_bytes");
    }
  }
  return available;
}

Result<std::string> read_file(const std::string& path) {
  FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) return io_error("cannot open '" + path + "': " + errno_text());
  struct stat info {};
  if (::fstat(file.get(), &info) != 0) return io_error("cannot stat '" + path + "': " + errno_text());
  if (S_ISDIR(info.st_mode)) return invalid_argument("'" + path + "' is a folder, not a file");
  bool regular = S_ISREG(info.st_mode);
  std::string content;
  // Pipes and devices report no size: they are read in growing steps until end of file.
  content.resize(regular ? static_cast<std::size_t>(info.st_size) : std::size_t{1} << 16);
  std::size_t filled = 0;
  while (true) {
    if (filled == content.size()) {
      if (regular) break;
      content.resize(content.size() * 2);
    }
    ssize_t count = ::read(file.get(), content.data() + filled, content.size() - filled);
    if (count < 0) {
      if (errno == EINTR) continue;
      return io_error("cannot read '" + path + "': " + errno_text());
    }
    if (count == 0) break;
    filled += static_cast<std::size_t>(count);
  }
  if (regular) {
    char extra = 0;
    bool grew = filled == content.size() && ::read(file.get(), &extra, 1) > 0;
    if (filled < content.size() || grew) {
      return io_error("'" + path + "' changed size while it was being read (" + std::to_string(info.st_size) +
                      " bytes at the start); is another program writing or truncating it?");
    }
  }
  content.resize(filled);
  return content;
}

Status make_directories(const std::string& path) {
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error) return io_error("cannot create folder '" + path + "': " + error.message());
  return {};
}

Status write_file_atomic(const std::string& requested_path, std::span<const std::byte> bytes) {
  if (requested_path.empty()) return invalid_argument("the output path is empty");
  // A symlink is written through (its target replaced), never replaced by a file of its own; a
  // directory, FIFO or device is not a file to replace.
  std::string path = requested_path;
  std::error_code error;
  for (int hops = 0; std::filesystem::is_symlink(path, error); ++hops) {
    // By hand: weakly_canonical keeps a dangling link as it is, and the rename would replace it.
    if (hops == 40) return invalid_argument("'" + requested_path + "' is a loop of symbolic links");
    std::filesystem::path target = std::filesystem::read_symlink(path, error);
    if (error) return io_error("cannot follow the link '" + requested_path + "': " + error.message());
    path = (target.is_absolute() ? target : std::filesystem::path(path).parent_path() / target).string();
  }
  auto status = std::filesystem::status(path, error);
  if (std::filesystem::is_directory(status)) {
    return invalid_argument("'" + requested_path + "' is a directory; give a file path to write");
  }
  if (path.back() == '/') return invalid_argument("'" + requested_path + "' ends with '/'; give a file path to write");
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    return invalid_argument("'" + requested_path +
                            "' is not a regular file (a FIFO, device or socket); give a file path");
  }
  std::filesystem::path target(path);
  std::string directory = target.has_parent_path() ? target.parent_path().string() : ".";
  std::string temp_path = directory + "/." + target.filename().string() + ".tmp-" + random_hex(6);
  FileDescriptor file(::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (file.get() < 0) {
    return io_error("cannot write '" + requested_path + "': cannot create a file in '" + directory +
                    "': " + errno_text());
  }
  auto fail = [&](const std::string& what) {
    std::string message = what + " '" + temp_path + "': " + errno_text();
    ::unlink(temp_path.c_str());
    return io_error(message);
  };
  std::size_t written = 0;
  while (written < bytes.size()) {
    ssize_t count = ::write(file.get(), bytes.data() + written, bytes.size() - written);
    if (count < 0) {
      if (errno == EINTR) continue;
      return fail("cannot write");
    }
    written += static_cast<std::size_t>(count);
  }
  if (::fsync(file.get()) != 0) return fail("cannot sync");
  if (::close(file.release()) != 0) return fail("cannot close");
  crash_point("files.before_rename");
  if (::rename(temp_path.c_str(), path.c_str()) != 0) return fail("cannot rename into place");
  return fsync_directory(directory);
}

Status write_file_atomic(const std::string& path, std::string_view text) {
  return write_file_atomic(path, std::as_bytes(std::span(text.data(), text.size())));
}

Result<std::unique_ptr<FileLock>> FileLock::try_acquire(const std::string& path) {
  auto lock = std::make_unique<FileLock>(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (lock->descriptor_ < 0) return io_error("cannot open " + path + ": " + std::strerror(errno));
  if (::flock(lock->descriptor_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return std::unique_ptr<FileLock>();
    return io_error("cannot lock " + path + ": " + std::strerror(errno));
  }
  return lock;
}

FileLock::~FileLock() {
  if (descriptor_ >= 0) ::close(descriptor_);  // closing releases the flock
}

}  // namespace slipway
