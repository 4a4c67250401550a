#include "purge/policy.h"

#include "core/options.h"

namespace lazymalloc {

namespace release_policy {

Reuse judge_reuse(uint8_t shift, uint64_t purged_ns, uint64_t now, uint64_t base_ns) {
  uint64_t since = now > purged_ns ? now - purged_ns : 0;
  uint64_t decay = base_ns << shift;
  if (since < decay) return {uint8_t(shift < kMaxDecayShift ? shift + 1 : shift), true};
  if (since > kForgiveFactor * decay && shift) return {uint8_t(shift - 1), false};
  return {shift, false};
}

uint64_t wait_ns(uint8_t shift, uint64_t base_ns, bool hysteresis) {
  if (!hysteresis || !shift) return base_ns;
  if (shift >= kMaxDecayShift) return ~uint64_t(0);  // pinned
  return base_ns << shift;
}

uint64_t due_ns(uint8_t shift, uint64_t stamp, uint64_t base_ns, bool hysteresis, uint64_t idle_ns) {
  uint64_t plain = stamp + base_ns;
  if (!hysteresis || !shift) return plain;
  // Lengthened (or pinned) until the process turns idle, then plain decay.
  uint64_t longer = shift >= kMaxDecayShift ? kNoDeadline : stamp + (base_ns << shift);
  uint64_t idle = plain > idle_ns ? plain : idle_ns;
  return longer < idle ? longer : idle;
}

bool keep_huge(uint8_t shift, uint64_t retained, uint64_t bytes, uint64_t retain_budget) {
  uint64_t budget = shift >= kMaxDecayShift || retain_budget > (~uint64_t(0) >> shift)
                        ? ~uint64_t(0) : retain_budget << shift;
  return retain_budget && retained + bytes <= budget;
}

bool hugepages_pay(bool advised, uint64_t active, uint64_t held, uint64_t unit_slot_bytes, uint64_t threshold) {
  if (advised) return held * 4 >= unit_slot_bytes;
  return active >= threshold && held * 2 >= unit_slot_bytes;
}

bool touched_slot_pays(uint64_t resident, uint64_t slot_bytes) { return resident * 8 >= slot_bytes * 7; }

}  // namespace release_policy

uint8_t ReleasePolicy::reuse_shift(const SlotMeta& m, uint64_t now, bool* premature) const {
  uint64_t base_ns = uint64_t(option(m.lazy_purged ? Opt::lazy_decay_ms : Opt::decay_ms)) * 1000000;
  release_policy::Reuse r = release_policy::judge_reuse(m.decay_shift, m.purged_ns, now, base_ns);
  *premature = r.premature;
  return r.shift;
}

uint64_t ReleasePolicy::wait_ns(const SlotMeta& m, uint64_t base_ns, const PurgeSelect& sel) const {
  return release_policy::wait_ns(m.decay_shift, base_ns, sel.hysteresis);
}

uint64_t ReleasePolicy::due_ns(const SlotMeta& m, uint64_t stamp, uint64_t base_ns, const PurgeSelect& sel) const {
  return release_policy::due_ns(m.decay_shift, stamp, base_ns, sel.hysteresis, sel.idle_ns);
}

bool ReleasePolicy::keep_huge(const SlotMeta& first, uint64_t bytes, uint64_t retained,
                              uint64_t retain_budget) const {
  return release_policy::keep_huge(first.decay_shift, retained, bytes, retain_budget);
}

bool ReleasePolicy::hugepages_pay(bool advised, uint64_t active, uint64_t held, uint64_t unit_slot_bytes) const {
  return release_policy::hugepages_pay(advised, active, held, unit_slot_bytes,
                                       uint64_t(option(Opt::hugepage_threshold)));
}

bool ReleasePolicy::touched_slot_pays(uint64_t resident, uint64_t slot_bytes) const {
  return release_policy::touched_slot_pays(resident, slot_bytes);
}

namespace {
constinit const ReleasePolicy g_release_policy;
}

const ReleasePolicy& release_policy_instance() { return g_release_policy; }

}  // namespace lazymalloc
