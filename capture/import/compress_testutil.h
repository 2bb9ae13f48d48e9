// Test helper for the importers' tests: compresses data the way the gzip,
// bzip2, xz and zstd tools do, so tests can feed InputStream every format.
#pragma once

#include <bzlib.h>
#include <lzma.h>
#include <zlib.h>
#include <zstd.h>

#include <cstdint>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace heaplab::import::testutil {

enum class Codec { none, gzip, bzip2, xz, zstd };

inline const char* codec_name(Codec c) {
  switch (c) {
    case Codec::none:
      return "none";
    case Codec::gzip:
      return "gzip";
    case Codec::bzip2:
      return "bzip2";
    case Codec::xz:
      return "xz";
    case Codec::zstd:
      return "zstd";
  }
  return "?";
}

inline void PrintTo(Codec c, std::ostream* os) { *os << codec_name(c); }

inline const char* codec_ext(Codec c) {
  switch (c) {
    case Codec::none:
      return ".txt";
    case Codec::gzip:
      return ".txt.gz";
    case Codec::bzip2:
      return ".txt.bz2";
    case Codec::xz:
      return ".txt.xz";
    case Codec::zstd:
      return ".txt.zst";
  }
  return "";
}

// Compresses `data` into one complete gzip member / bzip2 stream / xz stream /
// zstd frame (with a content checksum, like the zstd tool writes).
inline std::string compress(Codec c, std::string_view data) {
  std::string out;
  switch (c) {
    case Codec::none:
      return std::string(data);
    case Codec::gzip: {
      z_stream z{};
      if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        throw std::runtime_error("deflateInit2");
      out.resize(deflateBound(&z, static_cast<uLong>(data.size())) + 64);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
      z.avail_in = static_cast<uInt>(data.size());
      z.next_out = reinterpret_cast<Bytef*>(out.data());
      z.avail_out = static_cast<uInt>(out.size());
      const int rc = deflate(&z, Z_FINISH);
      out.resize(z.total_out);
      deflateEnd(&z);
      if (rc != Z_STREAM_END) throw std::runtime_error("deflate");
      return out;
    }
    case Codec::bzip2: {
      unsigned len = static_cast<unsigned>(data.size() + data.size() / 100 + 1024);
      out.resize(len);
      if (BZ2_bzBuffToBuffCompress(out.data(), &len, const_cast<char*>(data.data()), static_cast<unsigned>(data.size()),
                                   9, 0, 0) != BZ_OK)
        throw std::runtime_error("BZ2_bzBuffToBuffCompress");
      out.resize(len);
      return out;
    }
    case Codec::xz: {
      out.resize(lzma_stream_buffer_bound(data.size()));
      size_t pos = 0;
      if (lzma_easy_buffer_encode(1, LZMA_CHECK_CRC64, nullptr, reinterpret_cast<const uint8_t*>(data.data()),
                                  data.size(), reinterpret_cast<uint8_t*>(out.data()), &pos, out.size()) != LZMA_OK)
        throw std::runtime_error("lzma_easy_buffer_encode");
      out.resize(pos);
      return out;
    }
    case Codec::zstd: {
      ZSTD_CCtx* cctx = ZSTD_createCCtx();
      ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 3);
      ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
      out.resize(ZSTD_compressBound(data.size()));
      const size_t n = ZSTD_compress2(cctx, out.data(), out.size(), data.data(), data.size());
      ZSTD_freeCCtx(cctx);
      if (ZSTD_isError(n)) throw std::runtime_error(ZSTD_getErrorName(n));
      out.resize(n);
      return out;
    }
  }
  return out;
}

}  // namespace heaplab::import::testutil
