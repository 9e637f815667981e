/*
 * The segment heap checked and rebuilt (issue 15 item 6).
 *
 * The heap's free lists, its bump pointer and its quarantine change under
 * seg->lock in sequences of several stores; a process killed in the
 * middle of one (EOWNERDEAD for the next locker) leaves them half
 * changed: a block on a free list and still in the quarantine, a gap
 * block listed twice, a block unlinked that nobody holds. Used as they
 * are, they hand one block out twice.
 *
 * Rather than log every such sequence, the heap is rebuilt from what
 * cannot be half changed: the directory. Every block in use is named by a
 * published directory entry — QP directory pages, RQ rings, CQ rings and
 * inline pools, SRQ rings, bounce mailboxes — and every allocation is
 * published in the same critical section that made it (an object half
 * made by the dead holder is not published: its block is free again).
 * The quarantine is kept, less duplicates and entries that overlap a
 * block in use; every other byte below the bump pointer goes back to the
 * free lists, cut into aligned power-of-two blocks. The rebuild runs
 * before the mutex is marked consistent (seg.c), so a locker that dies
 * rebuilding leaves EOWNERDEAD for the next, who rebuilds again.
 *
 * The same walk checks a heap without changing it (hca_heap_check): every
 * block — in use, quarantined, or free-listed — inside the bumped part,
 * aligned to its size, no two overlapping, and together covering the
 * bumped part exactly (what is not covered is lost space). `softib
 * heap-check` and the tests call it.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hca_int.h" /* structures only: softib links this file alone */

struct blk {
	uint64_t rel;          /* offset from heap_off */
	uint8_t order;
	uint8_t kind;          /* enum hca_heap_kind */
	uint32_t qi;           /* quarantine index, for HCA_HEAP_QUAR */
};

struct blks {
	struct blk *v;
	size_t n, cap;
	int oom;
};

static void blk_add(struct blks *b, uint64_t rel, unsigned order, unsigned kind)
{
	if (b->n == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 1024;
		struct blk *v = realloc(b->v, cap * sizeof(*v));

		if (!v) {
			b->oom = 1;
			return;
		}
		b->v = v;
		b->cap = cap;
	}
	b->v[b->n++] = (struct blk){ rel, (uint8_t)order, (uint8_t)kind, 0 };
}

static unsigned order_of(uint64_t size)
{
	unsigned o = HCA_HEAP_MIN_ORDER;

	while ((1ULL << o) < size && o <= HCA_HEAP_MAX_ORDER)
		o++;
	return o;
}

/* A block named by the directory at heap offset off (0: none). */
static void add_off(struct hca_seg *seg, struct blks *b, uint64_t off, uint64_t size,
		    unsigned kind)
{
	if (!off)
		return;
	blk_add(b, off - seg->heap_off, order_of(size), kind);
}

static bool blk_has(const struct blks *b, uint64_t rel)
{
	for (size_t i = 0; i < b->n; i++)
		if (b->v[i].rel == rel)
			return true;
	return false;
}

static uint64_t ring_size(struct hca_seg *seg, uint64_t off)
{
	struct hca_ring *r = hca_seg_ptr(seg, off);

	if (off < seg->heap_off || off - seg->heap_off >= seg->heap_bump)
		return 4096; /* out of the heap: reported as such */
	return hca_ring_block(r);
}

/* Every block the directory names (seg->lock held). */
static void collect_live(struct hca_seg *seg, struct blks *b)
{
	for (uint32_t pg = 0; pg < HCA_QP_PAGES; pg++) {
		uint64_t off = atomic_load_explicit(&seg->qp_pages[pg], memory_order_relaxed);
		struct hca_qp_ent *p = hca_seg_ptr(seg, off);

		if (!off)
			continue;
		add_off(seg, b, off, (uint64_t)HCA_QP_PAGE * sizeof(*p), HCA_HEAP_LIVE);
		if (off - seg->heap_off >= seg->heap_bump)
			continue;
		/* an offset in an entry holds its block, published or not: a
		 * maker that died before publishing leaves it to the reclaim
		 * of its slot (reclaim.c), which frees it once — were the
		 * rebuild to free it too, the block would be free twice */
		for (uint32_t i = 0; i < HCA_QP_PAGE; i++)
			if (p[i].rq_off)
				add_off(seg, b, p[i].rq_off, ring_size(seg, p[i].rq_off),
					HCA_HEAP_LIVE);
	}
	for (uint32_t i = 0; i < HCA_MAX_CQ; i++) {
		struct hca_cq_ent *e = &seg->cqs[i];

		if (e->ring_off)
			add_off(seg, b, e->ring_off, ring_size(seg, e->ring_off),
				HCA_HEAP_LIVE);
		if (e->inl_off)
			add_off(seg, b, e->inl_off, e->inl_bytes, HCA_HEAP_LIVE);
	}
	for (uint32_t i = 0; i < HCA_MAX_SRQ; i++) {
		struct hca_srq_ent *e = &seg->srqs[i];

		if (e->ring_off)
			add_off(seg, b, e->ring_off, ring_size(seg, e->ring_off), HCA_HEAP_LIVE);
	}
	for (uint32_t i = 0; i < HCA_MAX_PROCS; i++) {
		const struct hca_heap_rec *r = &seg->procs[i].alloc;

		add_off(seg, b, seg->procs[i].bounce_off, seg->bounce_bytes, HCA_HEAP_LIVE);
		/* a block its taker died taking: the reclaim frees it (once
		 * an entry names it, it is counted there already) */
		if (r->off && !blk_has(b, r->off - seg->heap_off))
			add_off(seg, b, r->off, 1ULL << r->order, HCA_HEAP_LIVE);
	}
}

static int blk_cmp(const void *a, const void *b)
{
	const struct blk *x = a, *y = b;

	if (x->rel != y->rel)
		return x->rel < y->rel ? -1 : 1;
	return (int)x->kind - (int)y->kind;
}

static const char *const kind_names[] = {
	[HCA_HEAP_LIVE] = "in use", [HCA_HEAP_QUAR] = "quarantined",
	[HCA_HEAP_FREE] = "free",
};

static void problem(struct hca_heap_report *rep, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void problem(struct hca_heap_report *rep, const char *fmt, ...)
{
	va_list ap;

	if (!rep->problems++) {
		va_start(ap, fmt);
		vsnprintf(rep->first, sizeof(rep->first), fmt, ap);
		va_end(ap);
	}
}

/* Bounds and alignment of one block; false if it cannot be placed. */
static bool blk_ok(struct hca_seg *seg, const struct blk *k, struct hca_heap_report *rep)
{
	uint64_t size = 1ULL << k->order;

	if (k->order < HCA_HEAP_MIN_ORDER || k->order > HCA_HEAP_MAX_ORDER) {
		problem(rep, "%s block at +%#llx: order %u", kind_names[k->kind],
			(unsigned long long)k->rel, k->order);
		return false;
	}
	if (k->rel >= seg->heap_bump || size > seg->heap_bump - k->rel) {
		problem(rep, "%s block at +%#llx (%llu B) beyond the bump pointer +%#llx",
			kind_names[k->kind], (unsigned long long)k->rel,
			(unsigned long long)size, (unsigned long long)seg->heap_bump);
		return false;
	}
	if (k->rel & (size - 1)) {
		problem(rep, "%s block at +%#llx not aligned to its %llu B",
			kind_names[k->kind], (unsigned long long)k->rel,
			(unsigned long long)size);
		return false;
	}
	return true;
}

/* Sorted blocks: overlaps, and the bytes no block covers. */
static void check_sorted(struct hca_seg *seg, struct blks *b, struct hca_heap_report *rep)
{
	uint64_t end = 0, covered = 0;
	const struct blk *prev = NULL;

	if (b->n) /* qsort wants a non-null array, even empty */
		qsort(b->v, b->n, sizeof(*b->v), blk_cmp);
	for (size_t i = 0; i < b->n; i++) {
		const struct blk *k = &b->v[i];
		uint64_t size = 1ULL << k->order;

		if (!blk_ok(seg, k, rep))
			continue;
		rep->blocks[k->kind]++;
		rep->bytes[k->kind] += size;
		if (prev && k->rel < end) {
			problem(rep, "%s block at +%#llx overlaps %s block at +%#llx: "
				"one block would be handed out twice",
				kind_names[k->kind], (unsigned long long)k->rel,
				kind_names[prev->kind], (unsigned long long)prev->rel);
			rep->overlaps++;
		} else {
			covered += size;
		}
		if (k->rel + size > end) {
			end = k->rel + size;
			prev = k;
		}
	}
	rep->lost = seg->heap_bump > covered ? seg->heap_bump - covered : 0;
	if (rep->lost)
		problem(rep, "%llu B below the bump pointer in no block: lost",
			(unsigned long long)rep->lost);
}

int hca_heap_check(struct hca_seg *seg, struct hca_heap_report *rep)
{
	struct blks b = { 0 };
	uint64_t max_blocks = seg->heap_bump >> HCA_HEAP_MIN_ORDER;

	memset(rep, 0, sizeof(*rep));
	rep->bump = seg->heap_bump;
	rep->size = seg->heap_size;
	collect_live(seg, &b);
	if (seg->nquar > HCA_QUARANTINE_LEN)
		problem(rep, "quarantine count %u beyond its %u entries", seg->nquar,
			HCA_QUARANTINE_LEN);
	for (uint32_t i = 0; i < seg->nquar && i < HCA_QUARANTINE_LEN; i++)
		add_off(seg, &b, seg->quar[i].off, 1ULL << seg->quar[i].order, HCA_HEAP_QUAR);
	for (unsigned o = 0; o <= HCA_HEAP_MAX_ORDER; o++) {
		uint64_t n = 0;

		for (uint64_t off = seg->heap_free[o]; off; n++) {
			if (o < HCA_HEAP_MIN_ORDER || n > max_blocks ||
			    off < seg->heap_off || off - seg->heap_off >= seg->heap_bump) {
				problem(rep, "free list of order %u broken at %#llx (entry %llu)",
					o, (unsigned long long)off, (unsigned long long)n);
				break;
			}
			blk_add(&b, off - seg->heap_off, o, HCA_HEAP_FREE);
			off = *(uint64_t *)hca_seg_ptr(seg, off);
		}
	}
	if (b.oom)
		problem(rep, "out of memory while checking");
	else
		check_sorted(seg, &b, rep);
	free(b.v);
	return rep->problems ? EFAULT : 0;
}

/* The free block [rel, end) cut into aligned power-of-two blocks. */
static void free_range(struct hca_seg *seg, uint64_t rel, uint64_t end)
{
	while (rel < end) {
		unsigned o = HCA_HEAP_MIN_ORDER;
		uint64_t off = seg->heap_off + rel;

		while (o < HCA_HEAP_MAX_ORDER && !(rel & (1ULL << o)) &&
		       rel + (2ULL << o) <= end)
			o++;
		*(uint64_t *)hca_seg_ptr(seg, off) = seg->heap_free[o];
		seg->heap_free[o] = off;
		rel += 1ULL << o;
	}
}

/*
 * Keep the quarantine entries that are whole and clash with no block in
 * use nor with an entry kept before them, in their order; the kept ones
 * join b (which holds the blocks in use, and comes back sorted).
 */
static void rebuild_quarantine(struct hca_seg *seg, struct blks *b)
{
	uint32_t n = seg->nquar < HCA_QUARANTINE_LEN ? seg->nquar : HCA_QUARANTINE_LEN;
	struct hca_heap_report scratch = { 0 };
	uint8_t *drop = calloc(n ? n : 1, 1);
	uint32_t keep = 0;
	uint64_t end = 0;
	size_t cur = 0, w = 0;

	if (!drop) {
		b->oom = 1;
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct blk k = { seg->quar[i].off - seg->heap_off, seg->quar[i].order,
				 HCA_HEAP_QUAR, i };

		if (seg->quar[i].off < seg->heap_off || !blk_ok(seg, &k, &scratch)) {
			drop[i] = 1;
			continue;
		}
		blk_add(b, k.rel, k.order, HCA_HEAP_QUAR);
		if (!b->oom)
			b->v[b->n - 1].qi = i;
	}
	if (b->oom) {
		free(drop);
		return;
	}
	/* sorted, blocks in use first at one offset. Blocks are aligned
	 * powers of two, so two that overlap nest: a quarantine entry that
	 * overlaps the block before it goes, and so does one that a block in
	 * use (which nobody may take away) falls inside */
	if (b->n) /* qsort wants a non-null array, even empty */
		qsort(b->v, b->n, sizeof(*b->v), blk_cmp);
	for (size_t i = 0; i < b->n; i++) {
		struct blk *k = &b->v[i];
		uint64_t kend = k->rel + (1ULL << k->order);

		if (i && k->rel < end) {
			if (k->kind == HCA_HEAP_QUAR) {
				drop[k->qi] = 1;
				continue;
			}
			if (b->v[cur].kind == HCA_HEAP_QUAR) {
				drop[b->v[cur].qi] = 1;
				end = 0;
			}
		}
		cur = i;
		end = kend > end ? kend : end;
	}
	for (size_t i = 0; i < b->n; i++)
		if (b->v[i].kind != HCA_HEAP_QUAR || !drop[b->v[i].qi])
			b->v[w++] = b->v[i];
	b->n = w;
	for (uint32_t i = 0; i < n; i++)
		if (!drop[i])
			seg->quar[keep++] = seg->quar[i];
	seg->nquar = keep;
	free(drop);
}

int hca_heap_rebuild(struct hca_seg *seg)
{
	struct blks b = { 0 };
	uint64_t end = 0;

	collect_live(seg, &b);
	if (b.oom)
		goto oom;
	rebuild_quarantine(seg, &b);
	if (b.oom)
		goto oom;
	memset(seg->heap_free, 0, sizeof(seg->heap_free));
	for (size_t i = 0; i < b.n; i++) {
		const struct blk *k = &b.v[i];
		uint64_t size = 1ULL << k->order;

		if (k->rel >= seg->heap_bump)
			continue;
		if (k->rel > end)
			free_range(seg, end, k->rel);
		if (k->rel + size > end)
			end = k->rel + size;
	}
	if (end < seg->heap_bump)
		free_range(seg, end, seg->heap_bump);
	free(b.v);
	return 0;
oom:
	free(b.v);
	return ENOMEM;
}
