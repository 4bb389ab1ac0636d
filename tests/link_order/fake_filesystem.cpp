// A library that exports its own std::filesystem::remove_all, unversioned,
// as Python PyTorch's libtorch exports the parts of a libstdc++ linked into
// it. It counts the calls that reach it and removes nothing.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <system_error>

namespace {
std::atomic<int> calls{0};
}  // namespace

extern "C" int garden_fake_filesystem_calls() { return calls.load(); }

namespace std::filesystem {

uintmax_t remove_all(const path&) {
  ++calls;
  return 0;
}

uintmax_t remove_all(const path&, error_code& ec) {
  ++calls;
  ec.clear();
  return 0;
}

}  // namespace std::filesystem
