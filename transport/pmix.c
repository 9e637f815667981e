/*
 * pmix.c: bootstrap through PMIx, the wire-up service Open MPI's mpirun
 * (and other launchers) already provide.  Each process puts its worker
 * address under "sib.addr", commits, fences with data collection, and gets
 * every rank's address: the job's key (the XRC domain file) is the PMIx
 * namespace, the worker id the rank.  A PMIx event handler turns "process
 * aborted / terminated" into a failed endpoint (the handler runs on PMIx's
 * thread: it only queues the rank; progress fails the endpoint).
 */
#include <pmix.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sib_int.h"

#define ADDR_KEY "sib.addr"

static sib_worker_t *event_worker;   /* the worker PMIx events go to */

static void dead_queue(uint32_t rank)
{
	sib_worker_t *w = event_worker;

	if (!w)
		return;
	if (getenv("SIB_DEBUG"))
		sib_log("PMIx: rank %u has terminated", rank);
	pthread_mutex_lock(&w->dead_lock);
	if (w->ndead < sizeof(w->dead_ids) / sizeof(w->dead_ids[0]))
		w->dead_ids[w->ndead++] = rank;
	pthread_mutex_unlock(&w->dead_lock);
}

static void on_event(size_t id, pmix_status_t status, const pmix_proc_t *source,
		     pmix_info_t info[], size_t ninfo, pmix_info_t *results,
		     size_t nresults, pmix_event_notification_cbfunc_fn_t cbfunc,
		     void *cbdata)
{
	bool found = false;

	if (getenv("SIB_DEBUG"))
		sib_log("PMIx event %d (%s)", status, PMIx_Error_string(status));
	(void)id;
	(void)status;
	(void)results;
	(void)nresults;
	for (size_t i = 0; i < ninfo; i++)
		if (!strcmp(info[i].key, PMIX_EVENT_AFFECTED_PROC) &&
		    info[i].value.type == PMIX_PROC && info[i].value.data.proc) {
			dead_queue(info[i].value.data.proc->rank);
			found = true;
		}
	if (!found && source && source->rank != PMIX_RANK_WILDCARD)
		dead_queue(source->rank);
	if (cbfunc)
		cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
}

static sib_status_t fence_all(bool collect)
{
	pmix_info_t info;
	bool flag = true;
	pmix_status_t rc;

	if (!collect)
		return PMIx_Fence(NULL, 0, NULL, 0) == PMIX_SUCCESS ? SIB_OK :
			SIB_ERR_BOOTSTRAP;
	PMIX_INFO_CONSTRUCT(&info);
	PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &flag, PMIX_BOOL);
	rc = PMIx_Fence(NULL, 0, &info, 1);
	PMIX_INFO_DESTRUCT(&info);
	return rc == PMIX_SUCCESS ? SIB_OK : SIB_ERR_BOOTSTRAP;
}

static sib_status_t publish(sib_worker_t *w)
{
	pmix_value_t v;
	void *addr;
	size_t len;
	sib_status_t st = sib_worker_get_address(w, &addr, &len);

	if (st)
		return st;
	PMIX_VALUE_CONSTRUCT(&v);
	v.type = PMIX_BYTE_OBJECT;
	v.data.bo.bytes = addr;
	v.data.bo.size = len;
	st = PMIx_Put(PMIX_GLOBAL, ADDR_KEY, &v) == PMIX_SUCCESS &&
	     PMIx_Commit() == PMIX_SUCCESS ? SIB_OK : SIB_ERR_BOOTSTRAP;
	sib_address_free(addr);
	return st;
}

static sib_status_t connect_all(struct sib_job *job, const pmix_proc_t *me)
{
	pmix_proc_t p;

	job->eps = calloc(job->size, sizeof(job->eps[0]));
	if (!job->eps)
		return SIB_ERR_NO_MEMORY;
	for (uint32_t r = 0; r < job->size; r++) {
		pmix_value_t *v = NULL;
		sib_status_t st;

		PMIX_PROC_LOAD(&p, me->nspace, r);
		if (PMIx_Get(&p, ADDR_KEY, NULL, 0, &v) != PMIX_SUCCESS || !v ||
		    v->type != PMIX_BYTE_OBJECT) {
			sib_log("PMIx_Get(%s) of rank %u failed", ADDR_KEY, r);
			if (v)
				PMIX_VALUE_RELEASE(v);
			return SIB_ERR_BOOTSTRAP;
		}
		st = sib_ep_create(job->worker, v->data.bo.bytes, v->data.bo.size,
				   &job->eps[r]);
		PMIX_VALUE_RELEASE(v);
		if (st)
			return st;
	}
	return SIB_OK;
}

static void events_register(void)
{
	pmix_status_t codes[] = { PMIX_ERR_PROC_ABORTED, PMIX_PROC_TERMINATED,
				  PMIX_ERR_PROC_ABORTING,
				  PMIX_ERR_PROC_TERM_WO_SYNC };

	PMIx_Register_event_handler(codes, sizeof(codes) / sizeof(codes[0]),
				    NULL, 0, on_event, NULL, NULL);
}

SIB_API sib_status_t sib_init_pmix(const struct sib_context_params *p,
				   struct sib_job *job)
{
	struct sib_context_params cp = { 0 };
	struct sib_worker_params wp = { .id_set = 1 };
	pmix_proc_t me, wild;
	pmix_value_t *v = NULL;
	sib_status_t st;

	if (!job)
		return SIB_ERR_INVALID_PARAM;
	memset(job, 0, sizeof(*job));
	if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS)
		return SIB_ERR_BOOTSTRAP;
	PMIX_PROC_LOAD(&wild, me.nspace, PMIX_RANK_WILDCARD);
	if (PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &v) != PMIX_SUCCESS || !v) {
		st = SIB_ERR_BOOTSTRAP;
		goto err_pmix;
	}
	job->size = v->data.uint32;
	PMIX_VALUE_RELEASE(v);
	job->rank = me.rank;
	if (p)
		cp = *p;
	/* the job's key: given, else SIB_JOB_KEY (so that processes started
	 * outside mpirun can join: they set the same), else the namespace */
	if (!cp.job_key && !getenv("SIB_JOB_KEY"))
		cp.job_key = me.nspace;
	if ((st = sib_context_create(&cp, &job->ctx)))
		goto err_pmix;
	wp.id = job->rank;
	if ((st = sib_worker_create(job->ctx, &wp, &job->worker)))
		goto err_ctx;
	event_worker = job->worker;
	events_register();
	if ((st = publish(job->worker)) || (st = fence_all(true)) ||
	    (st = connect_all(job, &me)))
		goto err_worker;
	return SIB_OK;
err_worker:
	event_worker = NULL;
	free(job->eps);
	job->eps = NULL;
	sib_worker_destroy(job->worker);
err_ctx:
	sib_context_destroy(job->ctx);
err_pmix:
	PMIx_Finalize(NULL, 0);
	memset(job, 0, sizeof(*job));
	return st;
}

SIB_API sib_status_t sib_job_fence(struct sib_job *job)
{
	if (!job || !job->worker)
		return SIB_ERR_INVALID_PARAM;
	return fence_all(false);
}

SIB_API sib_status_t sib_fini_pmix(struct sib_job *job)
{
	if (!job || !job->worker)
		return SIB_ERR_INVALID_PARAM;
	event_worker = NULL;
	for (uint32_t r = 0; r < job->size; r++)
		if (job->eps[r])
			sib_ep_destroy(job->eps[r]);
	free(job->eps);
	sib_worker_destroy(job->worker);
	sib_context_destroy(job->ctx);
	PMIx_Finalize(NULL, 0);
	memset(job, 0, sizeof(*job));
	return SIB_OK;
}
