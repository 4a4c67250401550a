// A bounded text writer that never allocates: used for statistics, option
// listings and error messages.  Output past the buffer is counted, not
// written, so callers can report the size they would need (snprintf-style).
#pragma once

#include <cstddef>
#include <cstdint>

namespace lazymalloc {

class Writer {
 public:
  Writer(char* buf, size_t cap) : buf_(buf), cap_(cap) {}

  void put(char c);
  void put(const char* s);
  void put(const char* s, size_t n);
  void put_u64(uint64_t v);
  void put_i64(int64_t v);
  void put_hex(uint64_t v);  // 0x-prefixed
  // Fixed-point decimal: v / 10^decimals with that many digits shown.
  void put_fixed(uint64_t v, unsigned decimals);
  // Right-aligned in a field of `width` characters.
  void put_u64_padded(uint64_t v, unsigned width);
  void pad_to(size_t column_start, unsigned width);
  // A JSON string literal: quotes, with ", \\ and control characters escaped.
  void put_json_string(const char* s);
  // ISO 8601 UTC with milliseconds: "2026-11-30T22:36:41.123Z".
  void put_utc_time(uint64_t unix_ms);

  // NUL-terminates within the buffer; returns the full length wanted.
  size_t finish();
  size_t length() const { return len_; }
  const char* data() const { return buf_; }

 private:
  char* buf_;
  size_t cap_;
  size_t len_ = 0;
};

}  // namespace lazymalloc
