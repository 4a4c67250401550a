#include "core/options.h"

#include "core/format.h"

namespace lazymalloc {

const OptionInfo kOptionInfo[kOptionCount] = {
#define LM_OPT_INFO(name, kind, def, mn, mx, choices, doc) \
  {#name, OptKind::kind, int64_t(def), int64_t(mn), int64_t(mx), choices, doc},
    LAZYMALLOC_OPTIONS(LM_OPT_INFO)
#undef LM_OPT_INFO
};

std::atomic<int64_t> g_option_values[kOptionCount] = {
#define LM_OPT_DEF(name, kind, def, mn, mx, choices, doc) int64_t(def),
    LAZYMALLOC_OPTIONS(LM_OPT_DEF)
#undef LM_OPT_DEF
};

const VariableInfo kVariableInfo[kVariableCount] = {
#define LM_VAR_INFO(name, doc) {#name, doc},
    LAZYMALLOC_VARIABLES(LM_VAR_INFO)
#undef LM_VAR_INFO
};

namespace {

char lower(char c) { return (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c; }

bool equal_nocase(const char* a, size_t alen, const char* b) {
  size_t i = 0;
  for (; i < alen && b[i]; ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return i == alen && b[i] == '\0';
}

// Index of `text` among "a|b|c" choices, or -1.
int64_t choice_index(const char* choices, const char* text) {
  size_t tlen = 0;
  while (text[tlen]) ++tlen;
  int64_t index = 0;
  const char* start = choices;
  for (const char* p = choices;; ++p) {
    if (*p == '|' || *p == '\0') {
      size_t n = size_t(p - start);
      if (n == tlen) {
        bool same = true;
        for (size_t i = 0; i < n; ++i) same = same && lower(start[i]) == lower(text[i]);
        if (same) return index;
      }
      if (*p == '\0') return -1;
      ++index;
      start = p + 1;
    }
  }
}

bool parse_int(const char* s, OptKind kind, int64_t* out) {
  bool neg = false;
  if (*s == '-') {
    neg = true;
    ++s;
  }
  if (*s < '0' || *s > '9') return false;
  uint64_t v = 0;
  while (*s >= '0' && *s <= '9') {
    uint64_t next = v * 10 + uint64_t(*s - '0');
    if (next / 10 != v) return false;
    v = next;
    ++s;
  }
  unsigned shift = 0;
  if (kind == OptKind::kSize) {
    switch (*s) {
      case 'k': case 'K': shift = 10; ++s; break;
      case 'm': case 'M': shift = 20; ++s; break;
      case 'g': case 'G': shift = 30; ++s; break;
      case 't': case 'T': shift = 40; ++s; break;
      default: break;
    }
    if (shift && (*s == 'i' || *s == 'I')) ++s;
    if (shift && (*s == 'b' || *s == 'B')) ++s;
  } else if (kind == OptKind::kMillis) {
    if (s[0] == 'm' && s[1] == 's') {
      s += 2;
    } else if (s[0] == 's' && s[1] == '\0') {
      v *= 1000;
      ++s;
    }
  }
  if (*s != '\0') return false;
  if (shift && v > (uint64_t(1) << 62) >> shift) return false;
  v <<= shift;
  if (v > uint64_t(INT64_MAX)) return false;
  *out = neg ? -int64_t(v) : int64_t(v);
  return true;
}

// true/yes/on: 1, false/no/off: 0.
bool parse_bool_word(const char* text, int64_t* v) {
  if (equal_nocase(text, 4, "true") || equal_nocase(text, 3, "yes") || equal_nocase(text, 2, "on")) {
    *v = 1;
    return true;
  }
  if (equal_nocase(text, 5, "false") || equal_nocase(text, 2, "no") || equal_nocase(text, 3, "off")) {
    *v = 0;
    return true;
  }
  return false;
}

}  // namespace

bool option_parse(unsigned o, const char* text, int64_t* value) {
  const OptionInfo& info = kOptionInfo[o];
  int64_t v = 0;
  bool ok = false;
  if (info.kind == OptKind::kBool) {
    ok = parse_bool_word(text, &v) || parse_int(text, OptKind::kInt, &v);
  } else if (info.kind == OptKind::kEnum) {
    v = choice_index(info.choices, text);
    ok = v >= 0;
    // An enumeration that starts "off|on" (a boolean that grew values, as
    // `hugepages`) still takes the boolean words.
    if (!ok && equal_nocase(info.choices, 7, "off|on|")) ok = parse_bool_word(text, &v);
    if (!ok) ok = parse_int(text, OptKind::kInt, &v);
  } else {
    ok = parse_int(text, info.kind, &v);
  }
  if (!ok || v < info.min || v > info.max) return false;
  *value = v;
  return true;
}

unsigned option_find(const char* name) {
  size_t n = 0;
  while (name[n]) ++n;
  return option_find(name, n);
}

unsigned option_find(const char* name, size_t len) {
  for (unsigned i = 0; i < kOptionCount; ++i) {
    if (equal_nocase(name, len, kOptionInfo[i].name)) return i;
  }
  return kOptionCount;
}

unsigned variable_find(const char* name, size_t len) {
  for (unsigned i = 0; i < kVariableCount; ++i) {
    if (equal_nocase(name, len, kVariableInfo[i].name)) return i;
  }
  return kVariableCount;
}

const char* option_suggestion_name(unsigned index) {
  return index < kOptionCount ? kOptionInfo[index].name : kVariableInfo[index - kOptionCount].name;
}

unsigned option_suggest(const char* name, size_t len, unsigned* out, unsigned max) {
  // Edit distance with transpositions (optimal string alignment), case
  // folded, '-' read as '_'; names longer than kMax are not compared.
  constexpr size_t kMax = 48;
  auto fold = [](char c) { return c == '-' ? '_' : lower(c); };
  unsigned best[kOptionCount + kVariableCount];
  unsigned score[kOptionCount + kVariableCount];
  unsigned n = 0;
  if (len == 0 || len > kMax) return 0;
  for (unsigned k = 0; k < kOptionCount + kVariableCount; ++k) {
    const char* cand = option_suggestion_name(k);
    size_t clen = 0;
    while (cand[clen]) ++clen;
    if (clen > kMax) continue;
    unsigned rows[3][kMax + 1];
    unsigned *prev2 = rows[0], *prev = rows[1], *cur = rows[2];
    for (size_t j = 0; j <= clen; ++j) prev[j] = unsigned(j);
    for (size_t i = 1; i <= len; ++i) {
      cur[0] = unsigned(i);
      for (size_t j = 1; j <= clen; ++j) {
        const bool same = fold(name[i - 1]) == cand[j - 1];
        unsigned d = prev[j - 1] + (same ? 0 : 1);
        if (prev[j] + 1 < d) d = prev[j] + 1;
        if (cur[j - 1] + 1 < d) d = cur[j - 1] + 1;
        if (i > 1 && j > 1 && fold(name[i - 1]) == cand[j - 2] && fold(name[i - 2]) == cand[j - 1] &&
            prev2[j - 2] + 1 < d) {
          d = prev2[j - 2] + 1;
        }
        cur[j] = d;
      }
      unsigned* t = prev2;
      prev2 = prev;
      prev = cur;
      cur = t;
    }
    unsigned dist = prev[clen];
    // Close: one edit (two from 6 characters on, a quarter of the name for
    // long ones), or the typed name is a part of the known one ("decay" in
    // "decay_ms").
    bool close = dist <= (len >= 6 ? 2u : 1u) || dist <= len / 4;
    if (!close && len >= 4) {
      for (size_t at = 0; at + len <= clen && !close; ++at) {
        size_t i = 0;
        while (i < len && fold(name[i]) == cand[at + i]) ++i;
        if (i == len) {
          close = true;
          dist = unsigned(clen - len);
        }
      }
    }
    if (!close) continue;
    // Insert in order of distance (stable: table order among equals).
    unsigned pos = n;
    while (pos > 0 && score[pos - 1] > dist) {
      best[pos] = best[pos - 1];
      score[pos] = score[pos - 1];
      --pos;
    }
    best[pos] = k;
    score[pos] = dist;
    ++n;
  }
  if (n > max) n = max;
  for (unsigned i = 0; i < n; ++i) out[i] = best[i];
  return n;
}

namespace {

// "0", "64K", "32M", "1G": the largest power-of-1024 suffix that divides `v`.
void write_size(Writer& w, int64_t v) {
  static constexpr char kSuffix[] = {'T', 'G', 'M', 'K'};
  for (int i = 0; i < 4; ++i) {
    const int64_t unit = int64_t(1) << (10 * (4 - i));
    if (v != 0 && v % unit == 0) {
      w.put_i64(v / unit);
      w.put(kSuffix[i]);
      return;
    }
  }
  w.put_i64(v);
}

// Choice `index` of "a|b|c", or nothing.
void write_choice(Writer& w, const char* choices, int64_t index) {
  const char* p = choices;
  for (int64_t i = 0; i < index && *p; ++p) {
    if (*p == '|') ++i;
  }
  while (*p && *p != '|') w.put(*p++);
}

void write_code(Writer& w, const char* s, size_t n, bool code) {
  if (code) w.put('`');
  w.put(s, n);
  if (code) w.put('`');
}

void write_code(Writer& w, const char* s, bool code) {
  size_t n = 0;
  while (s[n]) ++n;
  write_code(w, s, n, code);
}

}  // namespace

void option_write_value(Writer& w, const OptionInfo& info, int64_t v) {
  switch (info.kind) {
    case OptKind::kEnum:
      if (v >= info.min && v <= info.max) {
        write_choice(w, info.choices, v);
        return;
      }
      break;
    case OptKind::kSize: write_size(w, v); return;
    case OptKind::kMillis:
      w.put_i64(v);
      w.put(" ms");
      return;
    case OptKind::kBool:
    case OptKind::kInt: break;
  }
  w.put_i64(v);
}

void option_write_values(Writer& w, const OptionInfo& info, bool code) {
  switch (info.kind) {
    case OptKind::kBool: {
      static const char* const kPairs[][2] = {{"1", "0"}, {"true", "false"}, {"yes", "no"}, {"on", "off"}};
      for (unsigned i = 0; i < 4; ++i) {
        if (i) w.put(", ");
        write_code(w, kPairs[i][0], code);
        w.put('/');
        write_code(w, kPairs[i][1], code);
      }
      return;
    }
    case OptKind::kEnum: {
      const char* start = info.choices;
      for (const char* p = info.choices;; ++p) {
        if (*p == '|' || *p == '\0') {
          if (start != info.choices) w.put(", ");
          write_code(w, start, size_t(p - start), code);
          if (*p == '\0') break;
          start = p + 1;
        }
      }
      w.put(" (or the index, ");
      w.put_i64(info.min);
      w.put(" to ");
      w.put_i64(info.max);
      w.put(')');
      return;
    }
    case OptKind::kSize:
      w.put("bytes, ");
      write_size(w, info.min);
      w.put(" to ");
      write_size(w, info.max);
      w.put(" (suffix K, M, G or T: powers of 1024)");
      return;
    case OptKind::kMillis:
      w.put_i64(info.min);
      w.put(" to ");
      w.put_i64(info.max);
      w.put(" ms (suffix ");
      write_code(w, "ms", code);
      w.put(", or ");
      write_code(w, "s", code);
      w.put(" for seconds)");
      return;
    case OptKind::kInt: break;
  }
  w.put_i64(info.min);
  w.put(" to ");
  w.put_i64(info.max);
}

const char* env_find(char** envp, const char* name) {
  if (!envp) return nullptr;
  for (char** e = envp; *e; ++e) {
    const char* s = *e;
    const char* n = name;
    while (*n && *s == *n) {
      ++s;
      ++n;
    }
    if (*n == '\0' && *s == '=') return s + 1;
  }
  return nullptr;
}

bool option_set(unsigned o, int64_t value) {
  if (o >= kOptionCount) return false;
  if (value < kOptionInfo[o].min || value > kOptionInfo[o].max) return false;
  g_option_values[o].store(value, std::memory_order_relaxed);
  return true;
}

unsigned options_load(char** envp, void (*report)(const char* msg, size_t len)) {
  static const char kPrefix[] = "LAZYMALLOC_";
  const size_t plen = sizeof(kPrefix) - 1;
  if (!envp) return 0;
  unsigned problems = 0;
  for (char** e = envp; *e; ++e) {
    const char* s = *e;
    size_t i = 0;
    while (i < plen && s[i] == kPrefix[i]) ++i;
    if (i != plen) continue;
    const char* name = s + plen;
    const char* eq = name;
    while (*eq && *eq != '=') ++eq;
    if (*eq != '=') continue;
    const size_t nlen = size_t(eq - name);
    const unsigned found = option_find(name, nlen);
    if (found == kOptionCount && variable_find(name, nlen) < kVariableCount) continue;
    int64_t v;
    if (found < kOptionCount && option_parse(found, eq + 1, &v)) {
      g_option_values[found].store(v, std::memory_order_relaxed);
      continue;
    }
    ++problems;
    if (!report) continue;
    // One line: the variable and its value, then what is wrong and what is
    // used instead.
    char buf[512];
    Writer w(buf, sizeof buf);
    w.put("lazymalloc: ");
    w.put(s, size_t(eq - s));
    w.put("=");
    w.put(eq + 1);
    if (found == kOptionCount) {
      w.put(": unknown variable, ignored");
      unsigned near[3];
      const unsigned n = option_suggest(name, nlen, near, 3);
      for (unsigned k = 0; k < n; ++k) {
        w.put(k == 0 ? " (did you mean " : k + 1 == n ? " or " : ", ");
        w.put(kPrefix);
        for (const char* p = option_suggestion_name(near[k]); *p; ++p) w.put(*p >= 'a' && *p <= 'z' ? char(*p - 32) : *p);
      }
      w.put(n ? "?)\n" : "\n");
    } else {
      const OptionInfo& info = kOptionInfo[found];
      w.put(": bad value, expected ");
      option_write_values(w, info, false);
      w.put("; using ");
      const int64_t used = g_option_values[found].load(std::memory_order_relaxed);
      option_write_value(w, info, used);
      w.put(used == info.def ? " (the default)\n" : "\n");
    }
    const size_t len = w.finish();
    // A line too long for the buffer still ends with a newline.
    if (len >= sizeof buf) buf[sizeof buf - 2] = '\n';
    report(buf, len < sizeof buf ? len : sizeof buf - 1);
  }
  return problems;
}

void options_write(Writer& w, bool json, unsigned name_width) {
  for (unsigned o = 0; o < kOptionCount; ++o) {
    const OptionInfo& info = kOptionInfo[o];
    int64_t v = g_option_values[o].load(std::memory_order_relaxed);
    if (json) {
      if (o) w.put(',');
      w.put('"');
      w.put(info.name);
      w.put("\":");
      if (info.kind == OptKind::kEnum) {
        w.put('"');
        write_choice(w, info.choices, v);
        w.put('"');
      } else {
        w.put_i64(v);
      }
    } else {
      w.put("  ");
      size_t col = w.length();
      w.put(info.name);
      w.pad_to(col, name_width);
      char value[32];
      Writer vw(value, sizeof value);
      if (info.kind == OptKind::kEnum) {
        write_choice(vw, info.choices, v);
      } else {
        vw.put_i64(v);
      }
      const size_t n = vw.finish();
      for (size_t i = n; i < 16; ++i) w.put(' ');
      w.put(value);
      w.put('\n');
    }
  }
}

}  // namespace lazymalloc
