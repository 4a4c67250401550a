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

}  // namespace

bool option_parse(unsigned o, const char* text, int64_t* value) {
  const OptionInfo& info = kOptionInfo[o];
  int64_t v = 0;
  bool ok = false;
  if (info.kind == OptKind::kBool) {
    if (equal_nocase(text, 4, "true") || equal_nocase(text, 3, "yes") ||
        equal_nocase(text, 2, "on")) {
      v = 1;
      ok = true;
    } else if (equal_nocase(text, 5, "false") || equal_nocase(text, 2, "no") ||
               equal_nocase(text, 3, "off")) {
      v = 0;
      ok = true;
    } else {
      ok = parse_int(text, OptKind::kInt, &v);
    }
  } else if (info.kind == OptKind::kEnum) {
    v = choice_index(info.choices, text);
    ok = v >= 0;
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
  for (unsigned i = 0; i < kOptionCount; ++i) {
    if (equal_nocase(name, n, kOptionInfo[i].name)) return i;
  }
  return kOptionCount;
}

bool option_set(unsigned o, int64_t value) {
  if (o >= kOptionCount) return false;
  if (value < kOptionInfo[o].min || value > kOptionInfo[o].max) return false;
  g_option_values[o].store(value, std::memory_order_relaxed);
  return true;
}

void options_load(char** envp, void (*report)(const char* msg, size_t len)) {
  static const char kPrefix[] = "LAZYMALLOC_";
  const size_t plen = sizeof(kPrefix) - 1;
  if (!envp) return;
  bool verbose = false;
  for (char** e = envp; *e; ++e) {
    if (equal_nocase(*e, 19, "LAZYMALLOC_VERBOSE=") && ((*e)[19] == '1' || lower((*e)[19]) == 't' ||
                                                        lower((*e)[19]) == 'y')) {
      verbose = true;
    }
  }
  for (char** e = envp; *e; ++e) {
    const char* s = *e;
    size_t i = 0;
    while (i < plen && s[i] == kPrefix[i]) ++i;
    if (i != plen) continue;
    const char* name = s + plen;
    const char* eq = name;
    while (*eq && *eq != '=') ++eq;
    if (*eq != '=') continue;
    unsigned found = kOptionCount;
    for (unsigned o = 0; o < kOptionCount; ++o) {
      if (equal_nocase(name, size_t(eq - name), kOptionInfo[o].name)) found = o;
    }
    char buf[256];
    Writer w(buf, sizeof buf);
    if (found == kOptionCount) {
      if (verbose && report) {
        w.put("lazymalloc: warning: unknown option ");
        w.put(s, size_t(eq - s));
        w.put(" ignored\n");
        report(buf, w.finish());
      }
      continue;
    }
    int64_t v;
    if (option_parse(found, eq + 1, &v)) {
      g_option_values[found].store(v, std::memory_order_relaxed);
    } else if (report) {
      w.put("lazymalloc: warning: bad value '");
      w.put(eq + 1);
      w.put("' for ");
      w.put(s, size_t(eq - s));
      w.put(" (kept default)\n");
      report(buf, w.finish());
    }
  }
}

void options_write(Writer& w, bool json) {
  for (unsigned o = 0; o < kOptionCount; ++o) {
    const OptionInfo& info = kOptionInfo[o];
    int64_t v = g_option_values[o].load(std::memory_order_relaxed);
    if (json) {
      if (o) w.put(',');
      w.put('"');
      w.put(info.name);
      w.put("\":");
      w.put_i64(v);
    } else {
      w.put("  ");
      size_t col = w.length();
      w.put(info.name);
      w.pad_to(col, 26);
      w.put_i64(v);
      if (info.kind == OptKind::kEnum) {
        // Name of the chosen value.
        const char* p = info.choices;
        for (int64_t i = 0; i < v && *p; ++p) {
          if (*p == '|') ++i;
        }
        w.put(" (");
        while (*p && *p != '|') w.put(*p++);
        w.put(')');
      }
      w.put('\n');
    }
  }
}

}  // namespace lazymalloc
