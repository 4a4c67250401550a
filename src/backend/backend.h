// The backend: address space in 2 MiB-aligned slots, unit runs and slot runs
// handed out as spans, the page map from address to span, and the page state
// (RETAINED / LAZY / CLEAN) and age of every free unit.
//
// Page-state machine (per 64 KiB unit; see docs/design.md):
//
//   in use --free--> RETAINED --decay(MADV_FREE)--> LAZY --lazy decay(DONTNEED)--> CLEAN
//     ^                 |                             |                        |
//     +------reuse------+-------reuse (no fault)------+--reuse (zero, faults)--+
//
// A never-touched unit is CLEAN.  The backend only keeps the books (page
// states, and when each slot was freed, made LAZY and purged) and hands
// ranges to the purger (purge/): it never decides when to purge, asks the
// release policy (SlotPolicy, purge/policy.h) whatever depends on the books,
// and never calls madvise itself, so the policy is testable alone and with
// a fake platform.
//
// Locking: one mutex (`lock_`) guards every field below except the page map
// lookups, which are lock-free (entries are written before any pointer into
// their slot is handed out and never cleared while an arena lives).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/meta_pool.h"
#include "backend/span.h"
#include "core/accounting.h"
#include "core/bits.h"
#include "core/config.h"
#include "core/stats.h"
#include "core/timeline.h"
#include "pal/lock.h"
#include "pal/pal.h"

namespace lazymalloc {

struct Arena;

enum class SlotKind : uint8_t {
  kFree = 0,   // part of a free slot run (every unit free)
  kUnits,      // cut into unit runs (small spans, large blocks), some may be free
  kHuge,       // part of a huge block
  kPurging,    // part of a free run held by the purger while madvise runs
};

struct SlotMeta {
  Span** unit_span;  // kUnitsPerSlot entries in the page map: the span covering each unit, nullptr if free
  uint32_t used;       // kUnits: units allocated or held by the purger
  uint32_t retained;   // free units that are resident (never set with `used`)
  uint32_t lazy;       // free units given MADV_FREE
  uint32_t purging;    // kUnits: units held by the purger (subset of `used`)
  uint32_t purge_mask; // kPurging runs: units of this slot being purged
  SlotKind kind;
  bool in_dirty;
  bool in_partial;
  // kUnits: the owner whose large blocks the slot was opened for (1..kOwners,
  // Backend::alloc's `owner`), or 0: shared (small spans, early use).  Which
  // partial list the slot is on; 0 whenever the slot is not kUnits.
  uint8_t owner;
  uint32_t run_len;    // kFree: length in slots, valid on a run's first and last slot
  uint8_t freed_by;    // kFree: the owner it had when it last went back whole (choose_free_resident)
  uint64_t free_ns;    // when a unit of this slot last became free
  uint64_t lazy_ns;    // when units of this slot last became LAZY
  uint64_t purged_ns;  // when units of this slot were last purged (0: never)
  uint8_t decay_shift; // the release policy's note (hysteresis: waits decay << decay_shift)
  bool suppressed;     // a purge of this idle episode was suppressed (counted once)
  bool thp;            // advised MADV_HUGEPAGE on its own (a huge block's slot)
  bool in_lazy;
  bool lazy_purged;    // its last purge was the lazy stage (hysteresis against lazy_decay_ms)
  bool sparse;         // kUnits: a slot of sparse spans only (alloc_units_span with `sparse`)
  bool nohuge;         // advised MADV_NOHUGEPAGE on its own (a sparse slot, or a withdrawal)
  bool touched;        // taken at least once since its arena was reserved (not fresh address space)
  SlotMeta* free_next; // free-run bin (first slot of a run)
  SlotMeta* free_prev;
  SlotMeta* part_next; // slots of kind kUnits with free units
  SlotMeta* part_prev;
  SlotMeta* dirty_next;  // slots with RETAINED free units, oldest free first
  SlotMeta* dirty_prev;
  SlotMeta* lazy_next;   // slots with LAZY free units, oldest lazy_ns first
  SlotMeta* lazy_prev;
  Arena* arena;
  uintptr_t base;      // address of the slot
};

// The page maps.  A root entry covers 2^13 slots (16 GiB) with a leaf of
// SlotMeta* (the slot map: owns_address) and a leaf of Span* per 64 KiB
// unit (the unit map: span_of, two dependent loads).  A root entry holds
// its leaf's address as an offset from the empty leaf of its map, a member
// of the Backend (Backend::empty_leaf_, empty_unit_leaf_), so that zero (a
// root entry without a leaf) leads to the empty leaf, whose entries are
// null ("nothing here"): the roots and the empty leaves are all zero in the
// binary (.bss), need no relocation at load time, and stay untouched until
// an arena is registered.  As the empty leaf lies at a fixed distance from
// the root, a lookup adds the root's address, already in a register for the
// root entry's load, to the entry and puts the distance into the leaf
// load's displacement: no extra load, no extra branch, one add.
inline constexpr size_t kPageMapLeafSize = size_t(1) << 13;
inline constexpr size_t kUnitLeafSize = kPageMapLeafSize * kUnitsPerSlot;

struct Arena {
  uintptr_t base;
  size_t nslots;
  SlotMeta* slots;
  Arena* next;
};

// One range handed to the purger.
using PurgeRange = AdviseRange;

// What one purge_collect() took: ranges to advise, and how to give them back.
struct PurgeBatch {
  static constexpr unsigned kMaxRanges = 64;
  static constexpr unsigned kMaxItems = 32;
  struct Item {
    SlotMeta* slot;    // kUnits slot (mask) or the first slot of a taken free run
    uint32_t mask;     // kUnits: units taken
    uint32_t run_len;  // free run: slots taken (0 for a unit item)
  };
  PurgeRange ranges[kMaxRanges];
  unsigned nranges = 0;
  Item items[kMaxItems];
  unsigned nitems = 0;
  size_t bytes = 0;
  bool lazy_stage = false;  // taken by purge_collect_lazy (LAZY units, for MADV_DONTNEED)

  // Empty, for a collection of `lazy` units or not.
  void start(bool lazy) {
    nranges = 0;
    nitems = 0;
    bytes = 0;
    lazy_stage = lazy;
  }
};

// Which free units a purge may take.
struct PurgeSelect {
  uint64_t now_ns;
  uint64_t min_age_free_ns;     // units in wholly free slots idle at least this long
  uint64_t min_age_partial_ns;  // units in slots that hold live data
  uint64_t min_age_lazy_ns;     // purge_collect_lazy: LAZY units idle at least this long
  size_t max_bytes;             // stop after this many bytes (one lock hold)
  size_t max_range;             // split ranges larger than this
  bool include_lazy;            // also take LAZY units (to make them CLEAN)
  bool lazy_stage;              // take_run (purge_collect_lazy): LAZY units old enough only
  bool hysteresis;              // per-slot decay multipliers apply (adaptive policy)
  // max_range, but at least a unit (a range is never split below one).
  size_t unit_range() const { return max_range < kUnitSize ? kUnitSize : max_range; }
  // Deadlines (next_decay_ns, next_lazy_ns): with `hysteresis`, when the
  // process turns idle if nothing else happens, from which the purger
  // ignores hysteresis.
  uint64_t idle_ns;
};

// A slot's unit mask with every unit set.
inline constexpr uint32_t kAllUnits = ~uint32_t{0};
// Bytes of the units in a slot's unit mask.
inline uint64_t units_bytes(uint32_t mask) { return uint64_t(popcount32(mask)) * kUnitSize; }

// No deadline: nothing would ever be taken.
inline constexpr uint64_t kNoDeadline = ~uint64_t(0);

// The release policy, as the backend asks it (purge/policy.h implements
// it; the purger hands it over, Backend::set_policy).  The backend records
// the facts of every slot (free_ns, lazy_ns, purged_ns, lazy_purged,
// suppressed) and keeps the policy's note on it (decay_shift); every
// judgement on them is the policy's.  Called under the backend lock.
class SlotPolicy {
 public:
  // Units of `m` purged at m.purged_ns are taken again at `now`: the
  // slot's decay_shift from now on; *premature when the purge came too
  // early (counted as a refault).
  virtual uint8_t reuse_shift(const SlotMeta& m, uint64_t now, bool* premature) const = 0;
  // How long `m` must stay free (base_ns: its plain decay in `sel`) before
  // a pass with `sel` takes it; ~0: never (pinned).
  virtual uint64_t wait_ns(const SlotMeta& m, uint64_t base_ns, const PurgeSelect& sel) const = 0;
  // When `m`, stamped at `stamp`, is due for a pass with `sel` (deadlines).
  virtual uint64_t due_ns(const SlotMeta& m, uint64_t stamp, uint64_t base_ns, const PurgeSelect& sel) const = 0;
  // Whether a freed huge block of `bytes` starting at slot `first` stays
  // RETAINED while `retained` bytes are, given the purger's budget.
  virtual bool keep_huge(const SlotMeta& first, uint64_t bytes, uint64_t retained, uint64_t retain_budget) const = 0;
  // Whether the arenas should carry hugepage advice (`advised`: they do
  // now): `active` bytes handed out, of which `held` are resident in unit
  // slots (not huge blocks, not pages purged inside spans) that span
  // `unit_slot_bytes`.
  virtual bool hugepages_pay(bool advised, uint64_t active, uint64_t held, uint64_t unit_slot_bytes) const = 0;
  // Whether a slot already touched on 4 KiB pages, `resident` bytes of its
  // `slot_bytes` resident now (Platform::resident_pages), is advised
  // MADV_HUGEPAGE with its arena (khugepaged then fills its untouched
  // pages); otherwise it is advised MADV_NOHUGEPAGE on its own.
  virtual bool touched_slot_pays(uint64_t resident, uint64_t slot_bytes) const = 0;

 protected:
  ~SlotPolicy() = default;
};

// Resumable position of purge_collect_all().
struct PurgeCursor {
  Arena* arena = nullptr;
  size_t slot = 0;
  bool started = false;
};

// A huge block's slots taken out of circulation for the release workers
// (purge/release.h) by Backend::release_huge().
struct SlotRun {
  SlotMeta* first = nullptr;
  size_t nslots = 0;
};

struct MemoryState {
  uint64_t reserved, active, retained, lazy, clean;
};

class Backend {
 public:
  constexpr Backend() = default;

  // `platform` and `stats` must outlive the backend.
  // `hugepages`: Opt::hugepages's value (HugepageMode, core/options.h; a
  // bool reads as off or on).
  void init(const Platform* platform, Stats* stats, size_t arena_reserve, unsigned hugepages);
  // The release policy (must outlive the backend), before the first release.
  void set_policy(const SlotPolicy* policy) { policy_ = policy; }
  // The bound on hugepage advice for slots of their own under a reuse
  // scope (may_advise_huge); tests lower it.
  void set_own_advice_cap(uint32_t cap) { own_advice_cap_ = cap; }

  // A span of `bytes` (rounded up to units, or to slots beyond kMaxLarge or
  // when `align` > kUnitSize) aligned to `align`.  Sets span->zero when every
  // byte is known to read as zero.  nullptr when out of memory.  `growing`
  // (a block moved by realloc) puts a large block at the start of a fresh
  // slot, the first of the largest free run, where it can grow in place,
  // become huge and grow on past its slot without a copy or a move.
  // `may_grow` false: fail rather than reserve a new arena (the caller first
  // waits for address space in release, see purge/release.h).
  // `give_back`: a list of unit runs (no huge block), chained by Span::next
  // and ended by nullptr, to release first, in the same lock hold, as
  // release() would (RETAINED); the new run may take their units.  They are
  // released whatever the outcome.
  // `owner` (0..kOwners): whose large block it is (the frontend's heap
  // shard, Heap::owner); a large block goes into its owner's slots first
  // (backend.cc, choose_units), so that a thread reuses the units it freed
  // itself, still in its core's caches.  0: the shared slots (another
  // owner's only as the last resort before a new arena, as for any owner).
  Span* alloc(size_t bytes, size_t align, bool growing = false, bool may_grow = true, Span* give_back = nullptr,
              unsigned owner = 0);
  // A run of `units` (1..32) units inside one slot, 64 KiB-aligned, for a
  // small-object span (the frontend sets its kind and geometry).  `sparse`:
  // a span whose pages the program touches sparsely (the frontend's
  // verdict, spans.cc): it goes into a slot of sparse spans only, taken
  // from the top of the largest free run and advised MADV_NOHUGEPAGE, so
  // that a few touched pages do not make a whole 2 MiB page resident.
  // `owner`: the heap's shard; the span also fits into that owner's slots,
  // but a fresh slot it opens is shared.
  Span* alloc_units_span(unsigned units, bool sparse = false, unsigned owner = 0);
  // Time of the last allocation or release through the backend.
  uint64_t last_activity_ns() const { return __atomic_load_n(&last_activity_ns_, __ATOMIC_RELAXED); }
  // Hard limit on active bytes (0 = none): alloc() fails beyond it.
  void set_hard_limit(uint64_t bytes) { __atomic_store_n(&hard_limit_, bytes, __ATOMIC_RELAXED); }
  uint64_t hard_limit() const { return __atomic_load_n(&hard_limit_, __ATOMIC_RELAXED); }
  // Gives a span back; its units become RETAINED and young (CLEAN when
  // `contents_gone`: the caller moved its pages away, see Platform::move_pages).
  // Returns the clock reading it used, for the caller's purge decisions.
  uint64_t release(Span* span, bool contents_gone = false);
  // Gives a huge span back.  It stays RETAINED, like release(), when the
  // policy says so (SlotPolicy::keep_huge, given `retain_budget`).  Otherwise its slots leave circulation (kPurging,
  // counted RETAINED until settled) and *run describes them: the caller
  // advises them chunk by chunk (run_batch) and settles each chunk with
  // purge_finish, after which the address range is reusable.  Returns true
  // if the block was kept; *now gets the clock reading.
  bool release_huge(Span* span, uint64_t retain_budget, SlotRun* run, uint64_t* now);
  // The purge batch of slots [first, first + n) of a run from release_huge:
  // one run item, ranges of at most max_range bytes (more when 64 ranges
  // would not cover the slots).  No state change, no lock.
  static void run_batch(SlotMeta* first, size_t n, size_t max_range, PurgeBatch* batch);
  // Grows or shrinks a large span (within its slot, up to kMaxLarge) or a
  // huge span (into the free slots after it) in place to `bytes`; false if
  // it cannot.  Small spans are never resized.
  bool resize(Span* span, size_t bytes);

  // Large blocks held by one thread (a thread's large cache, frontend/large.cc)
  // cut and joined without the lock: their units stay in use to the
  // backend, only their records and the unit map change.  REQUIRES: the
  // caller alone holds the spans (no live pointer into them elsewhere), each
  // a large unit run inside one slot (`in_one_slot`).
  static bool in_one_slot(const Span* s) {
    return s->kind == SpanKind::kLarge && s->first_unit + s->nunits <= kUnitsPerSlot;
  }
  // `s` keeps its first `units` (0 < units < s->nunits) units; the rest
  // becomes a span of its own in `rec` (a record from span_record, or
  // nullptr: one is taken here), which is returned; nullptr when no record
  // could be had (then `s` is unchanged).
  Span* split_units(Span* s, unsigned units, Span* rec);
  // `lo` takes `hi`, the run that follows it in the same slot; returns hi's
  // record, no longer used (for span_record_free, or a later split_units).
  Span* join_units(Span* lo, Span* hi);
  // A span record outside the backend's use (the pool's own lock only).
  void span_record_free(Span* s) { spans_.free(s); }

  // Lock-free: the span covering `p`, or nullptr if `p` is not in a live span
  // of this backend (foreign pointer, or a freed unit).
  Span* span_of(const void* p) const {
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    // The range check on the root index itself: one shift serves both.
    uintptr_t root_index = a >> (kSlotShift + kLeafBits);
    if (LM_UNLIKELY(root_index >= kRootSize)) return nullptr;
    // The root entry addressed in bytes from the root's address: GCC
    // computes &unit_root_[i] as (i + offset) * 8 from the global, an add
    // more on the free path; this way the offset goes into the lea of the
    // base.  The leaf is then that base plus the entry plus the empty
    // leaf's (constant) distance from the root, which goes into the load.
    const char* root = reinterpret_cast<const char*>(unit_root_);
    // Opaque to the compiler from here, so that it uses the register rather
    // than a second lea of the empty leaf's address.
    asm("" : "+r"(root));
    uintptr_t entry = __atomic_load_n(reinterpret_cast<const uintptr_t*>(root + root_index * sizeof(uintptr_t)),
                                      __ATOMIC_ACQUIRE);
    const char* leaf = root + entry + kEmptyUnitLeafDistance;
    return reinterpret_cast<Span* const*>(leaf)[(a >> kUnitShift) & (kUnitLeafSize - 1)];
  }
  // True if `p` lies in address space this backend reserved.
  bool owns_address(const void* p) const;

  // Purge mechanism (policy is in purge/).  purge_collect takes free units
  // chosen by `sel`, oldest first, out of circulation and lists their ranges;
  // the caller advises them with no lock held, then calls purge_finish with
  // the state they are now in (LAZY for MADV_FREE, CLEAN for DONTNEED; on
  // failure pass `failed` = true and they return as they were).
  void purge_collect(const PurgeSelect& sel, PurgeBatch* batch);
  void purge_finish(PurgeBatch* batch, bool made_clean, bool failed);
  // Like purge_collect, but walks every slot in address order from `cursor`
  // regardless of age (malloc_trim, explicit purges, memory pressure).
  // Done when cursor->arena is nullptr after the call.
  void purge_collect_all(const PurgeSelect& sel, PurgeCursor* cursor, PurgeBatch* batch);
  // The second stage: LAZY units whose slot became LAZY at least
  // sel.min_age_lazy_ns ago (shifted by hysteresis as for decay), oldest
  // first along the lazy list, for MADV_DONTNEED (batch->lazy_stage).
  void purge_collect_lazy(const PurgeSelect& sel, PurgeBatch* batch);
  // When purge_collect (resp. purge_collect_lazy) with `sel` would first take
  // something if nothing else happened (hysteresis until sel.idle_ns), or
  // kNoDeadline.  Walks its list oldest first only while an entry could be
  // due sooner than the best found, and at most kDeadlineScan entries (then
  // answers a lower bound: an early wakeup, never a late one).
  uint64_t next_decay_ns(const PurgeSelect& sel);
  uint64_t next_lazy_ns(const PurgeSelect& sel);
  static constexpr unsigned kDeadlineScan = 256;
  // Age of the oldest RETAINED free unit, or 0 if there is none.
  uint64_t oldest_retained_ns();

  // Span records: whole pages of free records above the lowest `keep`
  // (MetaPool::purge_collect), for the purger to advise MADV_DONTNEED with
  // no lock held, and their filing after it (`ok`: the advice took).
  void meta_purge_collect(size_t keep, MetaPurge* out) { spans_.purge_collect(keep, out); }
  void meta_purge_finish(const MetaPurge& p, bool ok) { spans_.purge_finish(p, ok, stats_); }
  // Span records handed out and not freed.
  size_t span_records() { return spans_.live_records(); }

  MemoryState memory_state() const;
  // Whether the arenas carry MADV_HUGEPAGE now (a racy read: a hint).
  bool arenas_huge() const { return __atomic_load_n(&huge_arenas_, __ATOMIC_RELAXED); }
  // Withdraws the arenas' hugepage advice if the heap has become sparse
  // (see hugepages_pay); called after purges, which make it so.
  void review_hugepages();
  // Pages purged inside live small spans, kept by the frontend.
  Gauge& span_purged() { return pages_.span_purged; }
  // The timeline page (core/timeline.h, lazymalloc-run --timeline): once set,
  // every operation that changes the page-state gauges publishes them there
  // before it lets go of the lock; nullptr (the default, and in a fork
  // child) publishes nothing.  set_timeline publishes once at once.
  void set_timeline(TimelinePage* page);
  // Walks every slot and list and checks the invariants that the rest of the
  // code relies on; returns a description of the first violation, or nullptr.
  // For tests (O(address space)).
  const char* check_invariants();
  Stats* stats() const { return stats_; }
  const Platform* platform() const { return platform_; }

  void fork_prepare() {
    lock_.lock();
    spans_.lock().lock();
    arena_records_.lock().lock();
  }
  void fork_parent() {
    arena_records_.lock().unlock();
    spans_.lock().unlock();
    lock_.unlock();
  }
  void fork_child() {
    arena_records_.lock().reset();
    spans_.lock().reset();
    lock_.reset();
    timeline_ = nullptr;  // the page is the parent's: a child never writes it
  }

 private:
  static constexpr unsigned kLeafBits = 13;
  static constexpr size_t kLeafSize = kPageMapLeafSize;
  static constexpr size_t kRootSize = size_t(1) << (kAddressBits - kSlotShift - kLeafBits);
  static constexpr unsigned kBins = 64;

  // All REQUIRES: lock_ held.
  Arena* add_arena(size_t min_slots, size_t align);
  bool register_arena(Arena* a);
  void* map_leaf(size_t bytes);  // a page-map leaf, counted as mapped metadata; nullptr if it fails
  SlotMeta* take_free_run(size_t nslots);
  SlotMeta* run_head(SlotMeta* m) const;  // the first slot of the free run that holds m (kFree)
  // Takes slots first..last out of the free run that starts at head; the
  // slots before and after them stay free runs.
  void run_cut(SlotMeta* head, SlotMeta* first, SlotMeta* last);
  // run_cut of `nslots` slots from `first`, marked carved (kHuge, until the
  // caller makes them unit slots).
  void carve_run(SlotMeta* head, SlotMeta* first, size_t nslots);
  void insert_free_run(SlotMeta* first, size_t nslots);
  void remove_free_run(SlotMeta* head);
  void release_slots(SlotMeta* first, size_t nslots, uint64_t now, bool clean);
  void release_huge_stats(const Span* s);
  // `straddle`: the run may continue into the next slot (large blocks).
  // `owner` (0..kOwners) and `claims`: whose slots the run looks at first
  // and whether a slot it opens becomes that owner's (large blocks) or
  // stays shared (small spans); see choose_units.  `rec`: a free span
  // record to use (cleared here), or nullptr for a new one.  An owner past
  // kOwners is taken as 0.
  Span* alloc_units(unsigned n, bool fresh_slot, bool may_grow, bool straddle, bool sparse, unsigned owner,
                    bool claims, Span* rec);
  // The last (`top`) or first slot of the largest free run, carved.
  SlotMeta* take_run_end(bool top);
  void advise_slot_nohuge(SlotMeta* m);  // MADV_NOHUGEPAGE once (hugepages on)
  void advise_slot_dense(SlotMeta* m, bool small);  // back to the arenas' advice (`small`: may_advise_huge)
  void release_units(Span* s, bool contents_gone, uint64_t now);  // a unit run; the record stays
  // The partial slot and first unit for a run of `n` units (see
  // backend.cc; with `straddle` the run may end in the next slot); false
  // when no partial slot has room.
  bool choose_units(unsigned n, bool straddle, bool sparse, unsigned owner, bool claims, SlotMeta** slot,
                    unsigned* idx, UnitFit* fit) const;
  // The best window in one partial list (`scanned`: fitting slots seen, at
  // most kFitScan over the calls of one choice).
  bool best_in_list(const SlotMeta* head, unsigned n, bool straddle, bool sparse, unsigned* scanned, UnitFit* best,
                    SlotMeta** best_slot) const;
  // Any owner's partial slot, before a new arena is reserved.
  bool choose_any_owner(unsigned n, bool sparse, SlotMeta** slot, unsigned* idx) const;
  // A free slot (kFree, in a free run) where a run of `n` units touches
  // fewer than `fresh` CLEAN units, and where in it (see backend.cc).
  bool choose_free_resident(unsigned n, unsigned fresh, unsigned owner, SlotMeta** slot, unsigned* idx) const;
  UnitFit straddle_fit(const SlotMeta* p, unsigned n) const;
  unsigned unit_parts(const Span* s, SlotMeta* slots[2], uint32_t masks[2]) const;
  void take_unit_slot(SlotMeta* head);
  static constexpr unsigned kFitScan = 64;
  Span* alloc_slots(size_t nslots, size_t align, bool may_grow);
  void account_take(SlotMeta* m, uint32_t mask);
  // Whether `more_active_bytes` may be handed out (hard limit); starts the
  // hugepage advice of every arena when hugepages_pay says so (`huge`: the
  // bytes go to a huge block, which does not fill the unit slots).
  bool admit(size_t more_active_bytes, bool huge);
  void advise_arenas_huge();
  bool keeps_small_pages(const SlotMeta& m);  // advise_arenas_huge: MADV_NOHUGEPAGE on its own
  // Which fresh slots keep 4 KiB pages (`hugepages`, resolved when advice
  // is first decided: `auto` asks the platform once): none (`on`), those
  // opened for small-object spans (`auto` on a guest that reports its free
  // memory to the host), or every one (`reused`).  Such a slot gets the
  // advice only once it has been used (SlotMeta::touched) and holds no
  // resident free unit: its 4 KiB pages were given back, and the next touch
  // faults in a hugepage.
  enum ReuseScope : uint8_t { kReuseNone, kReuseSmall, kReuseAll };
  ReuseScope reuse_scope();
  // Whether a free slot about to be taken whole (`small`: opened for
  // small-object spans; else a large or a huge block's) may get the
  // advice.  A used slot whose free units are still resident keeps its
  // 4 KiB pages (giving them back first to promote it was tried:
  // docs/design.md, "Hugepages on reused memory only").  Read before
  // account_take changes what the slot holds.
  // Past own_advice_cap_ such calls (each may split the arena's mapping:
  // vm.max_map_count), a slot in a reuse scope keeps the advice it has.
  bool may_advise_huge(const SlotMeta& m, bool small) {
    ReuseScope r = reuse_scope();
    if (r == kReuseNone) return true;
    if (own_advice_ >= (own_advice_cap_ ? own_advice_cap_ : kOwnAdviceCap)) return false;
    if (r == kReuseSmall && !small) return true;
    return m.touched && (m.retained | m.lazy) == 0;
  }
  void count_own_advice();  // a MADV_HUGEPAGE call for slots of their own under a reuse scope
  void withdraw_arenas_huge();
  bool hugepages_pay(uint64_t active, uint64_t more_huge = 0) const;
  void review_hugepages_locked();
  void advise_slots_huge(SlotMeta* first, size_t nslots);
  void note_activity(uint64_t now);  // sets now_ and last_activity_ns_
  // Page-state bytes (Stat::reserved_bytes .. clean_bytes): the books that
  // decisions read (pages_) and the statistic that reports them, together.
  Gauge& page_gauge(Stat s);
  void pages_add(Stat s, uint64_t n);
  void pages_sub(Stat s, uint64_t n);
  void dirty_touch(SlotMeta* m, uint64_t now);
  void dirty_remove(SlotMeta* m);
  void lazy_touch(SlotMeta* m, uint64_t now);  // units of m became LAZY now
  void lazy_remove(SlotMeta* m);               // if m has no LAZY unit left
  void lazy_unlink(SlotMeta* m);
  void partial_add(SlotMeta* m);
  void partial_remove(SlotMeta* m);
  void slot_units_to_free_run(SlotMeta* m, uint64_t now);
  static unsigned bin_of(size_t nslots);
  bool take_units(SlotMeta* m, uint32_t want, PurgeBatch* b, size_t max_range);
  // Takes the eligible free slots around `m` (kFree) out of their run for
  // purging; returns the slot after the last one taken.
  SlotMeta* take_run(SlotMeta* m, const PurgeSelect& sel, PurgeBatch* b, size_t max_range);
  static bool batch_full(const PurgeSelect& sel, const PurgeBatch* b);
  void bin_push(SlotMeta* head);
  void bin_unlink(SlotMeta* head);
  SlotMeta* slot_at(Arena* a, size_t index) const { return index < a->nslots ? &a->slots[index] : nullptr; }
  SlotMeta* neighbor(SlotMeta* m, ptrdiff_t delta) const;
  Span* new_span();
  Span* span_record(Span* rec);  // rec cleared for reuse, or new_span() when null

  // Publishes the gauges to timeline_, if any, when it goes out of scope:
  // declared after the LockGuard of an operation that changes them.
  struct PublishOnExit {
    Backend* b;
    ~PublishOnExit() {
      if (__builtin_expect(b->timeline_ != nullptr, 0)) b->publish_timeline();
    }
  };
  void publish_timeline();  // REQUIRES lock_

  const Platform* platform_ = nullptr;
  const SlotPolicy* policy_ = nullptr;
  Stats* stats_ = nullptr;  // reporting only: decisions read pages_
  // Written under lock_ at every allocation and release: on another line
  // than the pointers above, which every call reads before it
  // takes the lock (large-churn-2t: 15% of Backend::alloc's samples on the
  // load of platform_ while the other core wrote the gauges beside it).
  alignas(64) PageAccounting pages_;
  TimelinePage* timeline_ = nullptr;  // REQUIRES lock_
  size_t arena_reserve_ = 0;
  static constexpr size_t kFirstArena = size_t(64) << 20;
  unsigned grown_ = 0;               // REQUIRES lock_: regular arenas reserved below arena_reserve_
  bool hugepages_ = false;           // Opt::hugepages is not off
  // REQUIRES lock_: `hugepages=auto` until reuse_scope() has asked the platform.
  bool scope_pending_ = false;
  ReuseScope reuse_scope_ = kReuseNone;  // REQUIRES lock_: once not scope_pending_
  // REQUIRES lock_: MADV_HUGEPAGE calls for slots of their own under a reuse
  // scope, and their bound (0: kOwnAdviceCap, a quarter of the default
  // vm.max_map_count; zero so that the backend stays in .bss).
  static constexpr uint32_t kOwnAdviceCap = 16384;
  uint32_t own_advice_ = 0;
  uint32_t own_advice_cap_ = 0;
  bool huge_arenas_ = false;         // written under lock_ (atomic stores: arenas_huge() reads it unlocked): every arena is advised MADV_HUGEPAGE
  size_t unit_slots_ = 0;            // REQUIRES lock_: slots of kind kUnits
  // REQUIRES lock_: a free slot may hold resident units (choose_free_resident).
  bool free_resident_hint_ = false;
  uint64_t now_ = 0;                 // REQUIRES lock_: the clock at this operation
  uint64_t last_activity_ns_ = 0;
  uint64_t hard_limit_ = 0;
  size_t purging_slots_ = 0;         // REQUIRES lock_: slots of kind kPurging

  mutable Mutex lock_;
  Arena* arenas_ = nullptr;
  SlotMeta* bins_[kBins] = {};
  uint64_t bin_mask_ = 0;
  // Slots of kind kUnits with free units, one list per owner (0: shared).
  SlotMeta* partial_[kOwners + 1] = {};
  SlotMeta* dirty_head_ = nullptr;
  SlotMeta* dirty_tail_ = nullptr;
  SlotMeta* lazy_head_ = nullptr;
  SlotMeta* lazy_tail_ = nullptr;
  MetaPool<Span> spans_;
  MetaPool<Arena> arena_records_;
  // Offsets of the leaves from empty_leaf_ / empty_unit_leaf_ (0: the
  // empty leaf) until an arena needs them; written with release under
  // lock_, read with acquire by owns_address() and span_of().
  uintptr_t root_[kRootSize] = {};
  uintptr_t unit_root_[kRootSize] = {};
  // The empty leaves (page maps, above): never written.  The unit map's
  // follows its root, at the distance span_of() adds as a constant.
  Span* empty_unit_leaf_[kUnitLeafSize] = {};
  SlotMeta* empty_leaf_[kLeafSize] = {};
  static constexpr uintptr_t kEmptyUnitLeafDistance = sizeof(unit_root_);
  SlotMeta** slot_leaf(uintptr_t root_index) const {
    return reinterpret_cast<SlotMeta**>(__atomic_load_n(&root_[root_index], __ATOMIC_ACQUIRE) +
                                        reinterpret_cast<uintptr_t>(empty_leaf_));
  }
  Span** unit_leaf(uintptr_t root_index) const {
    return reinterpret_cast<Span**>(__atomic_load_n(&unit_root_[root_index], __ATOMIC_ACQUIRE) +
                                    reinterpret_cast<uintptr_t>(empty_unit_leaf_));
  }
};

}  // namespace lazymalloc
