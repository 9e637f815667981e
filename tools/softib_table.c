/*
 * softib_table.c: aligned text tables for the listings: rows of
 * fixed-size cells filled with cell(), printed with each column as wide as
 * its widest cell (numbers to the right).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "softib.h"

static char *cell_at(struct table *t, size_t row, int col)
{
	return t->cells + (row * (size_t)t->ncol + (size_t)col) * CELL;
}

/* Start a new row; cells are then set with cell(). */
size_t row_add(struct table *t)
{
	if (t->nrow == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		char *c = realloc(t->cells, cap * (size_t)t->ncol * CELL);

		if (!c) {
			fprintf(stderr, "softib: out of memory\n");
			exit(1);
		}
		t->cells = c;
		t->cap = cap;
	}
	memset(cell_at(t, t->nrow, 0), 0, (size_t)t->ncol * CELL);
	return t->nrow++;
}

void cell(struct table *t, size_t row, int col, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cell_at(t, row, col), CELL, fmt, ap);
	va_end(ap);
}

static void print_line(struct table *t, const int *w, size_t row, bool head)
{
	for (int c = 0; c < t->ncol; c++) {
		const char *s = head ? t->cols[c].name : cell_at(t, row, c);
		bool last = c == t->ncol - 1;

		if (t->cols[c].right)
			printf("%*s", w[c], s);
		else
			printf("%-*s", last ? 0 : w[c], s);
		printf(last ? "\n" : "  ");
	}
}

void table_print(struct table *t, const char *empty)
{
	int w[16] = { 0 };

	if (!t->nrow) {
		printf("%s\n", empty);
		return;
	}
	for (int c = 0; c < t->ncol && c < 16; c++) {
		w[c] = (int)strlen(t->cols[c].name);
		for (size_t r = 0; r < t->nrow; r++) {
			int n = (int)strlen(cell_at(t, r, c));
			w[c] = n > w[c] ? n : w[c];
		}
	}
	print_line(t, w, 0, true);
	for (size_t r = 0; r < t->nrow; r++)
		print_line(t, w, r, false);
	free(t->cells);
	t->cells = NULL;
}
