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

void Writer::put_json_string(const char* s) {
  put('"');
  for (; *s; ++s) {
    const unsigned char c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      put('\\');
      put(char(c));
    } else if (c < 0x20) {
      put("\\u00");
      put("0123456789abcdef"[c >> 4]);
      put("0123456789abcdef"[c & 15]);
    } else {
      put(char(c));
    }
  }
  put('"');
}

namespace {
void put_2(Writer& w, uint64_t v) {
  w.put(char('0' + v / 10 % 10));
  w.put(char('0' + v % 10));
}
}  // namespace

void Writer::put_utc_time(uint64_t unix_ms) {
  const uint64_t ms = unix_ms % 1000, secs = unix_ms / 1000;
  const uint64_t days = secs / 86400, sod = secs % 86400;
  // Civil date of a day count (proleptic Gregorian), counted in 400-year
  // eras of 146097 days from 0000-03-01, so that the leap day ends a year.
  const uint64_t z = days + 719468;
  const uint64_t era = z / 146097;
  const uint64_t doe = z - era * 146097;                                 // day of era, 0..146096
  const uint64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;  // year of era
  const uint64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);          // day of the March-based year
  const uint64_t mp = (5 * doy + 2) / 153;                               // month, March = 0
  const uint64_t day = doy - (153 * mp + 2) / 5 + 1;
  const uint64_t month = mp < 10 ? mp + 3 : mp - 9;
  const uint64_t year = yoe + era * 400 + (month <= 2 ? 1 : 0);
  put_u64(year);
  put('-');
  put_2(*this, month);
  put('-');
  put_2(*this, day);
  put('T');
  put_2(*this, sod / 3600);
  put(':');
  put_2(*this, sod / 60 % 60);
  put(':');
  put_2(*this, sod % 60);
  put('.');
  put(char('0' + ms / 100));
  put_2(*this, ms % 100);
  put('Z');
}

size_t Writer::finish() {
  if (cap_) buf_[len_ < cap_ ? len_ : cap_ - 1] = '\0';
  return len_;
}

}  // namespace lazymalloc
