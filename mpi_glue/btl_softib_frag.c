/*
 * Send fragments: a descriptor, its one segment and, right behind them, a
 * buffer of the module's max_send_size, in one allocation. Free ones wait
 * on a LIFO under a mutex (ob1 may send from several threads); at most
 * btl_softib_free_list_max exist at once (then alloc fails and ob1 waits
 * for a completion, as the BTL interface provides). They are plain memory,
 * not opal free-list items: nothing to register (libsib copies or
 * registers what it sends), and nothing of Open MPI's memory-pool
 * framework, which may be closed before the BTL's finalize runs. A
 * received fragment needs none: its descriptor lives on the stack of the
 * receive handler.
 */
#include "btl_softib.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t frag_lock = PTHREAD_MUTEX_INITIALIZER;
static mca_btl_softib_frag_t *frag_free; /* LIFO through next_free */
static mca_btl_softib_frag_t *frag_all;  /* every frag made, for fini */
static int frag_count;

int mca_btl_softib_frag_init(void)
{
	return OPAL_SUCCESS;
}

mca_btl_softib_frag_t *mca_btl_softib_frag_get(
	struct mca_btl_base_endpoint_t *ep, size_t size, uint32_t flags)
{
	mca_btl_softib_frag_t *f;

	if (size > mca_btl_softib_module.super.btl_max_send_size)
		return NULL;
	pthread_mutex_lock(&frag_lock);
	f = frag_free;
	if (f) {
		frag_free = f->next_free;
	} else if (frag_count < mca_btl_softib_component.free_list_max) {
		f = calloc(1, sizeof(*f) +
			   mca_btl_softib_module.super.btl_max_send_size);
		if (f) {
			f->next_all = frag_all;
			frag_all = f;
			frag_count++;
		}
	}
	pthread_mutex_unlock(&frag_lock);
	if (!f)
		return NULL;
	memset(&f->base, 0, sizeof(f->base));
	f->buf = (uint8_t *)(f + 1);
	f->seg.seg_addr.pval = f->buf;
	f->seg.seg_len = size;
	f->base.des_segments = &f->seg;
	f->base.des_segment_count = 1;
	f->base.des_flags = flags;
	f->base.order = MCA_BTL_NO_ORDER;
	f->endpoint = ep;
	return f;
}

void mca_btl_softib_frag_put(mca_btl_softib_frag_t *f)
{
	pthread_mutex_lock(&frag_lock);
	f->next_free = frag_free;
	frag_free = f;
	pthread_mutex_unlock(&frag_lock);
}

void mca_btl_softib_frag_fini(void)
{
	pthread_mutex_lock(&frag_lock);
	while (frag_all) {
		mca_btl_softib_frag_t *f = frag_all;
		frag_all = f->next_all;
		free(f);
	}
	frag_free = NULL;
	frag_count = 0;
	pthread_mutex_unlock(&frag_lock);
}
