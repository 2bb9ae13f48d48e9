// A string as an InputStream, for the importers' tests and fuzz drivers.
#pragma once

#include <algorithm>
#include <string>
#include <utility>

#include "capture/import/input_stream.h"

namespace heaplab::import::testutil {

// A string read as an input, under a chosen name.
class StringInput final : public InputStream {
 public:
  StringInput(std::string data, std::string name) : data_(std::move(data)) { name_ = std::move(name); }
  size_t read(char* buf, size_t n) override {
    const size_t k = std::min(n, data_.size() - pos_);
    data_.copy(buf, k, pos_);
    pos_ += k;
    return k;
  }
  const char* compression() const override { return "none"; }

 private:
  std::string data_;
  size_t pos_ = 0;
};

}  // namespace heaplab::import::testutil
