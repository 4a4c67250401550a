// The release policy's judgements on the facts the backend records about
// each slot.  The backend (backend.h) keeps the books: when a slot's units
// became free (free_ns), LAZY (lazy_ns), were purged (purged_ns, and whether
// by the lazy stage: lazy_purged), and the policy's own note on the slot
// (decay_shift); it asks SlotPolicy whenever a decision depends on them.
// The purger (purger.h) makes the other decisions: which pass runs when, with
// which ages and advice, and how much a freed huge block may keep RETAINED.
//
// Hysteresis (the adaptive policy): a slot whose purged memory is reused
// sooner than its own decay time was purged too early (a refault); its decay
// doubles, up to 2^kMaxDecayShift.  At the cap the slot is pinned: decay no
// longer purges it while the process is active; pressure, limits, trim and
// an idle process still do.  A reuse long after the purge (more than
// kForgiveFactor x its decay) halves it again.  The same shift lengthens the
// second stage (LAZY to CLEAN after lazy_decay_ms); a reuse after that
// stage's purge is judged against lazy_decay_ms.
//
// The functions in `release_policy` are pure (no clock, no options, no
// state) so that tests check them alone; ReleasePolicy applies them with the
// options' decay times.
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace lazymalloc {

inline constexpr uint8_t kMaxDecayShift = 5;
inline constexpr uint64_t kForgiveFactor = 8;

namespace release_policy {

struct Reuse {
  uint8_t shift;   // the slot's decay shift from now on
  bool premature;  // the purge came too early: a refault
};
// Units purged at `purged_ns` are taken again at `now`; the slot waited
// `base_ns` << `shift` (base_ns: decay_ms, or lazy_decay_ms after the lazy
// stage).
Reuse judge_reuse(uint8_t shift, uint64_t purged_ns, uint64_t now, uint64_t base_ns);
// How long a slot must stay free (base_ns: its plain decay) before a pass
// takes it: lengthened by the shift under hysteresis, ~0 when pinned.
uint64_t wait_ns(uint8_t shift, uint64_t base_ns, bool hysteresis);
// When a slot stamped at `stamp` is due, for the background thread's
// deadline: lengthened (or pinned) under hysteresis, but no later than plain
// decay after the process turns idle at `idle_ns`.
uint64_t due_ns(uint8_t shift, uint64_t stamp, uint64_t base_ns, bool hysteresis, uint64_t idle_ns);
// Whether a freed huge block of `bytes` stays RETAINED (kept for reuse)
// while `retained` bytes are: when they then stay within `retain_budget`
// shifted by the first slot's hysteresis (a range that came back soon after
// its last release earns a larger budget); a pinned range is kept unless the
// budget is 0 (pressure, limits, the eager policy).
bool keep_huge(uint8_t shift, uint64_t retained, uint64_t bytes, uint64_t retain_budget);
// Whether the arenas should be advised MADV_HUGEPAGE.  A small heap stays on
// 4 KiB pages (a hugepage makes the first touch of a slot fault in 2 MiB):
// the advice starts when `active` bytes reach `threshold`.  A heap that
// shrinks leaves live data scattered over slots whose free units and pages
// were purged, and while the arenas stay advised khugepaged (max_ptes_none
// 511 by default) collapses each such slot back into a whole 2 MiB page,
// filling the purged holes with zeroes (an idle process with 8 MiB live
// over 128 slots grew back to 30 MiB ten seconds after its purges).  So
// the advice lasts while what the unit slots really hold, resident and not
// purged (`held`: live data and RETAINED free memory), fills at
// least a quarter of them (`unit_slot_bytes`), and starts again only at
// the threshold with at least half: the band between keeps a heap near
// one edge from switching back and forth.
bool hugepages_pay(bool advised, uint64_t active, uint64_t held, uint64_t unit_slot_bytes, uint64_t threshold);
// Whether a slot already touched on 4 KiB pages (`resident` bytes of its
// `slot_bytes` resident now) should be advised MADV_HUGEPAGE with its
// arena.  Advised, it is collapsed by khugepaged (max_ptes_none 511 by
// default: one present page is enough) into a whole 2 MiB page within
// seconds of the advice (rptest: its three first slots, 106, 252 and 305
// of 512 pages resident, each collapsed within a second), which makes its
// untouched pages (uncarved span tails, free units never used) resident.
// So only a slot whose collapse adds at most an eighth of it.
bool touched_slot_pays(uint64_t resident, uint64_t slot_bytes);

}  // namespace release_policy

// The policy the backend asks (Purger::init gives it to the backend).
// Stateless: the decay times come from the options at each call.
class ReleasePolicy final : public SlotPolicy {
 public:
  constexpr ReleasePolicy() = default;
  uint8_t reuse_shift(const SlotMeta& m, uint64_t now, bool* premature) const override;
  uint64_t wait_ns(const SlotMeta& m, uint64_t base_ns, const PurgeSelect& sel) const override;
  uint64_t due_ns(const SlotMeta& m, uint64_t stamp, uint64_t base_ns, const PurgeSelect& sel) const override;
  bool keep_huge(const SlotMeta& first, uint64_t bytes, uint64_t retained, uint64_t retain_budget) const override;
  bool hugepages_pay(bool advised, uint64_t active, uint64_t held, uint64_t unit_slot_bytes) const override;
  bool touched_slot_pays(uint64_t resident, uint64_t slot_bytes) const override;
};

// The process's one ReleasePolicy.
const ReleasePolicy& release_policy_instance();

}  // namespace lazymalloc
