/*
 * pmix_hello: the smallest check that a launcher gives its processes a
 * working PMIx exchange — what the message runtime's bootstrap relies on.
 * Started by mpirun (not an MPI program):
 *
 *   mpirun -np N build/test/pmix_hello
 *
 * Each process publishes "rank R pid P host H" under the key sib.hello
 * (PMIX_GLOBAL), commits, waits in a fence that collects the data, reads
 * every peer's value and checks that it names that peer's rank. It prints
 *
 *   pmix_hello: rank R of N on HOST: ok, N values, K hosts
 *
 * where K counts the distinct hostnames among the values (the namespace
 * hosts of test/integration/hosts.sh each have one of their own).
 * Exit status 0 if every value was there and right, 1 otherwise.
 */
#include <limits.h>
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KEY "sib.hello"

static int fail(const pmix_proc_t *me, const char *what, pmix_status_t rc)
{
	fprintf(stderr, "pmix_hello: rank %u: %s: %s\n", me->rank, what,
		PMIx_Error_string(rc));
	return 1;
}

/* Reads peer r's value; 0 if it is there and names rank r. host gets the
 * hostname it carries. */
static int check_peer(const pmix_proc_t *me, uint32_t r, char *host,
		      size_t hlen)
{
	pmix_proc_t peer;
	pmix_value_t *val = NULL;
	unsigned got_rank, pid;
	char h[HOST_NAME_MAX + 1];
	pmix_status_t rc;

	PMIX_PROC_LOAD(&peer, me->nspace, r);
	rc = PMIx_Get(&peer, KEY, NULL, 0, &val);
	if (rc != PMIX_SUCCESS)
		return fail(me, "PMIx_Get of a peer's value", rc);
	int bad = val->type != PMIX_STRING ||
		  sscanf(val->data.string, "rank %u pid %u host %64s",
			 &got_rank, &pid, h) != 3 ||
		  got_rank != r;
	if (bad)
		fprintf(stderr, "pmix_hello: rank %u: peer %u's value is "
			"'%s'\n", me->rank, r,
			val->type == PMIX_STRING ? val->data.string : "?");
	else
		snprintf(host, hlen, "%s", h);
	PMIX_VALUE_RELEASE(val);
	return bad;
}

int main(void)
{
	pmix_proc_t me, wild;
	pmix_value_t v, *val = NULL;
	pmix_info_t info;
	pmix_status_t rc;
	char host[HOST_NAME_MAX + 1], mine[HOST_NAME_MAX + 64];
	uint32_t size;
	int bad = 0;

	rc = PMIx_Init(&me, NULL, 0);
	if (rc != PMIX_SUCCESS) {
		fprintf(stderr, "pmix_hello: PMIx_Init: %s (not started by a "
			"PMIx launcher?)\n", PMIx_Error_string(rc));
		return 1;
	}
	PMIX_PROC_LOAD(&wild, me.nspace, PMIX_RANK_WILDCARD);
	rc = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &val);
	if (rc != PMIX_SUCCESS || val->type != PMIX_UINT32) {
		bad = fail(&me, "PMIx_Get(PMIX_JOB_SIZE)", rc);
		goto out;
	}
	size = val->data.uint32;
	PMIX_VALUE_RELEASE(val);

	gethostname(host, sizeof(host));
	host[sizeof(host) - 1] = 0;
	snprintf(mine, sizeof(mine), "rank %u pid %u host %s", me.rank,
		 (unsigned)getpid(), host);
	PMIX_VALUE_LOAD(&v, mine, PMIX_STRING);
	rc = PMIx_Put(PMIX_GLOBAL, KEY, &v);
	PMIX_VALUE_DESTRUCT(&v);
	if (rc == PMIX_SUCCESS)
		rc = PMIx_Commit();
	if (rc != PMIX_SUCCESS) {
		bad = fail(&me, "PMIx_Put/Commit", rc);
		goto out;
	}
	bool collect = true;
	PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
	rc = PMIx_Fence(&wild, 1, &info, 1);
	PMIX_INFO_DESTRUCT(&info);
	if (rc != PMIX_SUCCESS) {
		bad = fail(&me, "PMIx_Fence", rc);
		goto out;
	}

	/* every value, and the distinct hostnames among them */
	char (*hosts)[HOST_NAME_MAX + 1] = calloc(size, sizeof(*hosts));
	unsigned nhosts = 0;
	if (!hosts) {
		bad = 1;
		goto out;
	}
	for (uint32_t r = 0; r < size; r++) {
		char h[HOST_NAME_MAX + 1] = "";
		unsigned k;
		if (check_peer(&me, r, h, sizeof(h))) {
			bad = 1;
			continue;
		}
		for (k = 0; k < nhosts && strcmp(hosts[k], h); k++)
			;
		if (k == nhosts)
			snprintf(hosts[nhosts++], sizeof(hosts[0]), "%s", h);
	}
	free(hosts);
	printf("pmix_hello: rank %u of %u on %s: %s, %u values, %u hosts\n",
	       me.rank, size, host, bad ? "FAILED" : "ok", size, nhosts);
	fflush(stdout);
out:
	rc = PMIx_Finalize(NULL, 0);
	if (rc != PMIX_SUCCESS)
		bad = fail(&me, "PMIx_Finalize", rc);
	return bad;
}
