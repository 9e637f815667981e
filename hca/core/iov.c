/*
 * Copies between iovec lists in this process: the inline receive pool
 * (cq_inline.c) and the links' byte movers share them.
 */
#include <string.h>

#include "hca_int.h"

/* Copy between two iovec lists of equal total length, in this process. */
void hca_iov_copy(const struct iovec *dst, int ndst,
		  const struct iovec *src, int nsrc)
{
	size_t di = 0, doff = 0, si = 0, soff = 0;

	while ((int)di < ndst && (int)si < nsrc) {
		size_t dl = dst[di].iov_len - doff, sl = src[si].iov_len - soff;
		size_t n = dl < sl ? dl : sl;

		memcpy((char *)dst[di].iov_base + doff, (char *)src[si].iov_base + soff, n);
		doff += n;
		soff += n;
		if (doff == dst[di].iov_len) {
			di++;
			doff = 0;
		}
		if (soff == src[si].iov_len) {
			si++;
			soff = 0;
		}
	}
}

size_t hca_iov_len(const struct iovec *v, int n)
{
	size_t t = 0;

	for (int i = 0; i < n; i++)
		t += v[i].iov_len;
	return t;
}
