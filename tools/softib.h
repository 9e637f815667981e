/*
 * softib.h: what the parts of the `softib` tool share (tools/softib*.c):
 * the read-only view of the host's segment (softib_view.c), aligned text
 * tables (softib_table.c), and each subcommand's entry point.
 */
#ifndef SOFTIB_TOOL_H
#define SOFTIB_TOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ring.h"
#include "seg.h"

/* ---- the segment, read-only (softib_view.c) ---- */

struct view {
	const struct hca_seg *seg;
	size_t len;
	char name[96];
};

/* 0: mapped; 1: no segment on this host; -1: error (already reported). */
int view_open(struct view *v);
void view_close(struct view *v);
/* A ring header in the heap, or NULL if the offset is not plausible. */
const struct hca_ring *view_ring(const struct view *v, uint64_t off);
uint32_t ring_queued(const struct hca_ring *r);
/* A QP directory page (NULL: none, or not inside the mapping). */
const struct hca_qp_ent *view_qp_page(const struct view *v, uint32_t pg);
int live_procs(const struct hca_seg *seg);

/* Each entry of the QP directory that has a page: e runs over them. */
#define FOR_EACH_QP_ENT(v, e)                                                   \
	for (uint32_t pg_ = 0; pg_ < HCA_QP_PAGES; pg_++)                       \
		for (const struct hca_qp_ent *p_ = view_qp_page((v), pg_), *e = p_; \
		     p_ && e < p_ + HCA_QP_PAGE; e++)

/* ---- aligned tables (softib_table.c) ---- */

#define CELL 40

struct col {
	const char *name;
	bool right;          /* numbers align right */
};

struct table {
	const struct col *cols;
	int ncol;
	char *cells;         /* nrow * ncol cells of CELL bytes */
	size_t nrow, cap;
};

/* A table of the columns of array cols: as many cells a row as it has
 * columns (a count written by hand once fell one short, and the last
 * column's cells overran the rows). */
#define TABLE(cols) { (cols), (int)(sizeof(cols) / sizeof((cols)[0])), NULL, 0, 0 }

/* Start a new row; cells are then set with cell(). */
size_t row_add(struct table *t);
__attribute__((format(printf, 4, 5)))
void cell(struct table *t, size_t row, int col, const char *fmt, ...);
/* Print the table (or `empty` if it has no row) and free its rows. */
void table_print(struct table *t, const char *empty);
/* The pid owning an object (slot, generation) if still live, else "-". */
void owner_cell(struct table *t, size_t row, int col,
		const struct hca_seg *seg, uint16_t slot, uint32_t gen);

/* ---- the subcommands ---- */

void show_status(const struct view *v, int rc);   /* softib_status.c */
void show_procs(const struct view *v);            /* softib_objects.c */
void show_qps(const struct view *v);
void show_srqs(const struct view *v);
void show_cqs(const struct view *v);
void show_mrs(const struct view *v);
void show_xrcds(const struct view *v);
void show_counters(const struct view *v);         /* softib_counters.c */
void show_sib(const struct view *v);              /* softib_sib.c */
int softib_heap_check(void);                      /* softib_heap.c */

#endif
