struct lk { struct lk *prev, *next; };
static inline void l_del(struct lk *e) { e->prev->next = e->next; e->next->prev = e->prev;  }
static inline void l_add_tail(struct lk *h, struct lk *e) { e->prev = h->prev; e->next = h; h->prev->next = e; h->prev = e; }
struct host { int state; struct lk pending, retry; };
struct req { struct host *h; struct lk qlink; };
void f(struct req **rs, int n)
{
	for (int i = 0; i < n; i++) {
		struct req *r = rs[i];
		struct host *h = r->h;
		
		l_add_tail(&h->retry, &r->qlink);
		while (h->retry.next != &h->retry) {
			struct lk *e = h->retry.prev;
			l_del(e);
			l_add_tail(h->pending.next, e);
		}
	}
}
