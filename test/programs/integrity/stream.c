/* integrity: randomness, message patterns, the operation stream of a QP,
 * scatter/gather layouts and the byte checks both sides use. */
#include "integrity.h"

const char *const type_names[] = { "rc", "uc", "ud" };

const char *const kind_names[] = {
	"SEND", "SEND_WITH_IMM", "RDMA_WRITE", "RDMA_WRITE_WITH_IMM",
	"RDMA_READ", "FETCH_AND_ADD(shared)", "FETCH_AND_ADD(private)",
	"CMP_AND_SWP(private)"
};

/* Percent weight of each kind per transport: what each one allows. */
const uint8_t kind_weight[Q_NTYPES][K_NKINDS] = {
	[Q_RC] = { 22, 14, 14, 14, 18, 6, 6, 6 },
	[Q_UC] = { 30, 20, 25, 25, 0, 0, 0, 0 },
	[Q_UD] = { 60, 40, 0, 0, 0, 0, 0, 0 },
};

bool consumes_recv(int k)
{
	return k == K_SEND || k == K_SEND_IMM || k == K_WRITE ||
	       k == K_WRITE_IMM;
}

bool is_write(int k)
{
	return k == K_WRITE || k == K_WRITE_IMM;
}

bool is_atomic(int k)
{
	return k >= K_FAA_SHARED;
}

/* ---- randomness and patterns ---- */

uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

uint64_t rng64(struct rng *r)
{
	r->s += GOLDEN;
	return mix64(r->s);
}

uint32_t rng_below(struct rng *r, uint32_t n)
{
	return (uint32_t)(((rng64(r) >> 32) * n) >> 32);
}

uint64_t pattern_word(uint64_t key, uint64_t w)
{
	uint64_t v = key + w * GOLDEN;

	v ^= v >> 29;
	v *= 0xbf58476d1ce4e5b9ull;
	return v ^ (v >> 32);
}

/* Fills out[0, n) with the bytes at [pos, pos + n) of message m. */
void stream_fill(const struct msgid *m, uint64_t pos, uint8_t *out,
			size_t n)
{
	while (n) {
		if (m->hdr && pos < 8) {
			uint32_t v = pos < 4 ? m->sid : m->seq;

			*out++ = (uint8_t)(v >> (8 * (pos & 3)));
			pos++;
			n--;
			continue;
		}
		uint64_t v = pattern_word(m->key, pos >> 3);
		unsigned b = pos & 7;

		if (b == 0 && n >= 8) {
			uint64_t le = htole64(v);

			memcpy(out, &le, 8);
			out += 8;
			pos += 8;
			n -= 8;
			continue;
		}
		for (; b < 8 && n; b++, n--, pos++)
			*out++ = (uint8_t)(v >> (8 * b));
	}
}

/* ---- the operation stream of one QP ---- */

uint32_t sender_id(int client, int type, int q)
{
	return (uint32_t)client << 16 | (uint32_t)type << 8 | (uint32_t)q;
}

uint64_t stream_seed(uint32_t sid)
{
	return mix64(P.seed * GOLDEN ^ ((uint64_t)sid << 20) ^ 0x5eed);
}

struct msgid op_msgid(const struct op *op, uint32_t sid)
{
	return (struct msgid){ .key = op->key, .sid = sid, .seq = op->seq,
			       .hdr = op->len >= 8 };
}

struct msgid read_msgid(void)
{
	return (struct msgid){ .key = mix64(P.seed ^ 0x7ead7ead) };
}

uint32_t gen_len(struct rng *r, int type)
{
	uint32_t p;

	if (type == Q_UD)
		return 1 + rng_below(r, P.mtu);
	p = rng_below(r, 100);
	if (p < 35)
		return 1 + rng_below(r, 64);
	if (p < 65)
		return 65 + rng_below(r, 4096 - 64);
	if (p < 97)
		return 4097 + rng_below(r, 65536 - 4096);
	return 65537 + rng_below(r, LARGE - 65536);
}

/* The next operation of a stream.  Client and server call it with the
 * same generator state, so they agree on everything it decides. */
void gen_op(struct rng *r, int type, uint32_t sid, uint32_t seq,
		   struct op *op)
{
	uint32_t w = rng_below(r, 100), acc = 0;
	int k;

	for (k = 0; k < K_NKINDS - 1; k++) {
		acc += kind_weight[type][k];
		if (w < acc)
			break;
	}
	while (kind_weight[type][k] == 0)
		k--;
	memset(op, 0, sizeof(*op));
	op->seq = seq;
	op->kind = (uint8_t)k;
	op->key = mix64(P.seed ^ ((uint64_t)sid << 32 | seq) ^ 0xda7a);
	op->imm = (uint32_t)(op->key >> 32);
	if (is_atomic(k)) {
		op->len = 8;
		op->roff = rng_below(r, NSHARED);
		op->arg = k == K_FAA_SHARED ? 1 + rng_below(r, 1000) : rng64(r);
		op->cas_hit = rng_below(r, 4) != 0;
		return;
	}
	op->len = gen_len(r, type);
	if (is_write(k))
		op->roff = (uint64_t)(seq % NSLOT) * SLOT + GUARD +
			   rng_below(r, SLOT - 2 * GUARD - op->len + 1);
	else if (k == K_READ)
		op->roff = rng_below(r, RSIZE - op->len + 1);
}

/* ---- ring allocator over a registered arena (FIFO release) ---- */

/* Returns the offset of n contiguous bytes, or -1; *end is what to release
 * them with. */
int64_t ring_alloc(struct ring *r, uint64_t n, uint64_t *end)
{
	uint64_t pos = r->head;

	if (r->head == r->tail) /* empty: restart at 0, no waste */
		pos = r->head = r->tail = 0;
	if (pos % r->size + n > r->size)
		pos += r->size - pos % r->size;
	if (pos + n - r->tail > r->size)
		return -1;
	r->head = pos + n;
	*end = r->head;
	return (int64_t)(pos % r->size);
}

void ring_release(struct ring *r, uint64_t end)
{
	r->tail = end;
}

uint64_t ring_used(const struct ring *r)
{
	return r->head - r->tail;
}

/* ---- scatter/gather layouts: pieces carved out of a footprint ---- */

/* Splits total bytes into 1..MAX_SGE non-empty pieces, with a random lead
 * (< 64) and gaps (< 16) between them: fits in total + FOOT_EXTRA - 16. */
void layout_make(struct rng *r, uint32_t total, struct layout *lo)
{
	uint32_t k = 1 + rng_below(r, MAX_SGE), at, left = total;

	if (total == 0) {
		lo->n = 0;
		return;
	}
	if (k > total)
		k = total;
	lo->n = (int)k;
	at = rng_below(r, 64);
	for (uint32_t i = 0; i < k; i++) {
		uint32_t len = i == k - 1 ? left :
			       1 + rng_below(r, left - (k - 1 - i));

		lo->off[i] = at;
		lo->len[i] = len;
		left -= len;
		at += len + rng_below(r, 16);
	}
}

int layout_sges(const struct layout *lo, uint8_t *base, uint32_t lkey,
		       struct ibv_sge *sge)
{
	for (int i = 0; i < lo->n; i++)
		sge[i] = (struct ibv_sge){ .addr = (uintptr_t)(base + lo->off[i]),
					   .length = lo->len[i], .lkey = lkey };
	return lo->n;
}

/* Fills the pieces with bytes [pos0, ...) of message m. */
void scatter_fill(const struct layout *lo, uint8_t *base,
			 const struct msgid *m, uint64_t pos0)
{
	for (int i = 0; i < lo->n; i++) {
		stream_fill(m, pos0, base + lo->off[i], lo->len[i]);
		pos0 += lo->len[i];
	}
}

/* Copies bytes [pos, pos + n) of the scattered stream out of the pieces. */
void gather(const struct layout *lo, const uint8_t *base, uint64_t pos,
		   uint8_t *out, size_t n)
{
	for (int i = 0; i < lo->n && n; i++) {
		if (pos >= lo->len[i]) {
			pos -= lo->len[i];
			continue;
		}
		size_t take = lo->len[i] - pos < n ? lo->len[i] - pos : n;

		memcpy(out, base + lo->off[i] + pos, take);
		out += take;
		n -= take;
		pos = 0;
	}
}

/* First byte in [p, p + n) that is not the canary, or -1. */
int64_t find_not_canary(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != CANARY)
			return (int64_t)i;
	return -1;
}

/* Compares p[0, n) with bytes [pos, pos + n) of m.  Returns the index of
 * the first difference or -1; *got / *want the bytes there. */
int64_t compare_stream(const uint8_t *p, size_t n,
			      const struct msgid *m, uint64_t pos,
			      uint8_t *got, uint8_t *want)
{
	uint8_t tmp[4096];

	for (size_t done = 0; done < n;) {
		size_t c = n - done < sizeof(tmp) ? n - done : sizeof(tmp);

		stream_fill(m, pos + done, tmp, c);
		if (memcmp(p + done, tmp, c)) {
			for (size_t i = 0; i < c; i++)
				if (p[done + i] != tmp[i]) {
					*got = p[done + i];
					*want = tmp[i];
					return (int64_t)(done + i);
				}
		}
		done += c;
	}
	return -1;
}

/* Checks a footprint of fp bytes holding pieces lo: of the scattered
 * stream, the first skip bytes are not checked (the GRH of UD), the next
 * n must be bytes [pos0, ...) of m, the rest of the pieces and everything
 * outside them the canary.  Describes the first fault in msg. */
bool check_scatter(const uint8_t *base, uint32_t fp,
			  const struct layout *lo, uint32_t skip, uint32_t n,
			  const struct msgid *m, uint64_t pos0, char *msg,
			  size_t msz)
{
	uint32_t cur = 0, sp = 0;
	uint8_t got, want;
	int64_t bad;

	for (int i = 0; i <= lo->n; i++) {
		uint32_t end = i < lo->n ? lo->off[i] : fp;

		bad = find_not_canary(base + cur, end - cur);
		if (bad >= 0) {
			snprintf(msg, msz, "byte %#x of the buffer, outside "
				 "the scatter list, was overwritten (%#x)",
				 (unsigned)(cur + bad), base[cur + bad]);
			return false;
		}
		if (i == lo->n)
			break;
		/* piece i holds stream bytes [sp, sp + len) */
		const uint8_t *pc = base + lo->off[i];
		uint32_t len = lo->len[i], a = 0;

		if (sp < skip) /* GRH part */
			a = skip - sp < len ? skip - sp : len;
		if (a < len && sp + a < skip + n) {
			uint32_t dlen = skip + n - (sp + a);

			if (dlen > len - a)
				dlen = len - a;
			bad = compare_stream(pc + a, dlen, m,
					     pos0 + (sp + a - skip), &got,
					     &want);
			if (bad >= 0) {
				snprintf(msg, msz, "payload byte %" PRIu64
					 " is %#04x, expected %#04x (SGE %d "
					 "of %d)", sp + a - skip + bad, got,
					 want, i, lo->n);
				return false;
			}
			a += dlen;
		}
		bad = find_not_canary(pc + a, len - a);
		if (bad >= 0) {
			snprintf(msg, msz, "receive buffer byte %" PRIu64
				 " beyond the message was overwritten (%#x)",
				 (uint64_t)sp + a + bad, pc[a + bad]);
			return false;
		}
		sp += len;
		cur = lo->off[i] + len;
	}
	return true;
}
