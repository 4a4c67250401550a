#include "core/format.h"

namespace lazymalloc {

void Writer::put(char c) {
  if (len_ + 1 < cap_) buf_[len_] = c;
  ++len_;
}

void Writer::put(const char* s) {
  while (*s) put(*s++);
}

void Writer::put(const char* s, size_t n) {
  for (size_t i = 0; i < n; ++i) put(s[i]);
}

void Writer::put_u64(uint64_t v) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = char('0' + v % 10);
    v /= 10;
  } while (v);
  while (n) put(tmp[--n]);
}

void Writer::put_i64(int64_t v) {
  if (v < 0) {
    put('-');
    put_u64(uint64_t(0) - uint64_t(v));
  } else {
    put_u64(uint64_t(v));
  }
}

void Writer::put_hex(uint64_t v) {
  put("0x");
  char tmp[16];
  int n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v);
  while (n) put(tmp[--n]);
}

void Writer::put_fixed(uint64_t v, unsigned decimals) {
  uint64_t scale = 1;
  for (unsigned i = 0; i < decimals; ++i) scale *= 10;
  put_u64(v / scale);
  if (!decimals) return;
  put('.');
  uint64_t frac = v % scale;
  for (uint64_t s = scale / 10; s; s /= 10) {
    put(char('0' + (frac / s) % 10));
  }
}

void Writer::put_u64_padded(uint64_t v, unsigned width) {
  unsigned digits = 1;
  for (uint64_t t = v; t >= 10; t /= 10) ++digits;
  for (unsigned i = digits; i < width; ++i) put(' ');
  put_u64(v);
}

void Writer::pad_to(size_t column_start, unsigned width) {
  while (len_ < column_start + width) put(' ');
}

size_t Writer::finish() {
  if (cap_) buf_[len_ < cap_ ? len_ : cap_ - 1] = '\0';
  return len_;
}

}  // namespace lazymalloc
