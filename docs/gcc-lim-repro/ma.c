#include <stdio.h>
struct lk { struct lk *prev, *next; };
struct host { int state; struct lk pending, retry; };
struct req { struct host *h; struct lk qlink; };
void f(struct req **rs, int n);
int main(void)
{
	struct host h; struct req a, b; struct req *rs[1] = { &a };
	h.pending.prev = h.pending.next = &h.pending;
	/* b already on retry */
	h.retry.prev = h.retry.next = &b.qlink; b.qlink.prev = b.qlink.next = &h.retry;
	a.h = b.h = &h;
	f(rs, 1);
	puts("ok");
	return 0;
}
