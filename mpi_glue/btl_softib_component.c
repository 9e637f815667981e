/*
 * The softib BTL component: parameters, init (a libsib context and worker,
 * the worker's address into Open MPI's modex), progress, close.
 *
 * Open MPI calls init once per process, before add_procs; a process whose
 * softib device cannot be opened reports no module, and Open MPI goes on
 * without us (or stops with "unreachable" if softib was the only way).
 */
#include "btl_softib.h"

#include <stdio.h>
#include <unistd.h>

#include "opal/util/output.h"

static int softib_register(void);
static int softib_open(void);
static int softib_close(void);
static mca_btl_base_module_t **softib_init(int *num, bool progress_threads,
					   bool mpi_threads);
static int softib_progress(void);

mca_btl_softib_component_t mca_btl_softib_component = {
	.super = {
		.btl_version = {
			MCA_BTL_DEFAULT_VERSION("softib"),
			.mca_open_component = softib_open,
			.mca_close_component = softib_close,
			.mca_register_component_params = softib_register,
		},
		.btl_data = {
			.param_field = MCA_BASE_METADATA_PARAM_CHECKPOINT,
		},
		.btl_init = softib_init,
		.btl_progress = softib_progress,
	},
};

static int softib_register(void)
{
	mca_btl_softib_component_t *c = &mca_btl_softib_component;
	mca_base_component_t *v = &c->super.btl_version;

	c->free_list_max = 8192;
	mca_base_component_var_register(v, "free_list_max",
		"Most send fragments this process keeps (each holds one "
		"largest eager message)", MCA_BASE_VAR_TYPE_INT, NULL, 0, 0,
		OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY,
		&c->free_list_max);
	c->verbose = 0;
	mca_base_component_var_register(v, "verbose",
		"Say why the component is not used, and what it chose",
		MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_5,
		MCA_BASE_VAR_SCOPE_LOCAL, &c->verbose);
	return mca_btl_softib_module_setup(&mca_btl_softib_module);
}

/* The fragment list lives from init to the module's finalize: its buffers
 * come from Open MPI's default memory pool, which is gone by the time the
 * component closes. */
static int softib_open(void)
{
	OBJ_CONSTRUCT(&mca_btl_softib_component.lock, opal_mutex_t);
	return OPAL_SUCCESS;
}

static int softib_close(void)
{
	OBJ_DESTRUCT(&mca_btl_softib_component.lock);
	return OPAL_SUCCESS;
}

static void say(const char *what, sib_status_t st)
{
	if (mca_btl_softib_component.verbose)
		opal_output(0, "btl softib: %s: %s", what,
			    sib_status_string(st));
}

/* Every job started by one mpirun (the first and any it spawns) shares a
 * job family: their processes on a host share one XRC domain, so that a
 * spawned process reaches the others over the same per-host connections. */
static void job_key(char *buf, size_t len)
{
	snprintf(buf, len, "ompi-%u-%u", (unsigned)getuid(),
		 (unsigned)(OPAL_PROC_MY_NAME.jobid >> 16));
}

static mca_btl_base_module_t **softib_init(int *num, bool progress_threads,
					   bool mpi_threads)
{
	mca_btl_softib_component_t *c = &mca_btl_softib_component;
	struct sib_context_params cp = { 0 };
	/* a rank that dies takes the job down through mpirun: a peer on
	 * another host is failed by libsib only after 30 s unreachable, so
	 * that ranks starved of CPU on an oversubscribed host are not */
	struct sib_worker_params wp = { .peer_timeout_ms = 30000 };
	mca_btl_base_module_t **mods = NULL;
	void *addr = NULL;
	size_t alen = 0;
	char key[64];
	sib_status_t st;
	int rc;

	*num = 0;
	job_key(key, sizeof(key));
	cp.job_key = key;
	c->threads = mpi_threads;
	cp.thread_mode = mpi_threads ? SIB_THREAD_MULTI : SIB_THREAD_SINGLE;
	cp.progress_mode = SIB_PROGRESS_POLL;
	cp.progress_mode_set = 1;
	/* a rank alone on its host talks over softib only to other hosts:
	 * eager to 128 KiB there (libsib's larger class; the BTL's eager
	 * limit follows it), where ob1's RGET takes three one-way trips —
	 * 32 KiB across two namespace hosts 53 -> 27 us (docs/mpi.md). With
	 * ranks beside it, RGET (one CMA copy on the host) stays. */
	cp.remote_peers_only = opal_process_info.num_local_peers == 0;
	st = sib_context_create(&cp, &c->ctx);
	if (st != SIB_OK) {
		say("no libsib context (no softib device?)", st);
		return NULL;
	}
	/* id_set = 0: an id from the host and the pid, unique across jobs
	 * (ranks are not: a spawned job numbers its own from 0) */
	st = sib_worker_create(c->ctx, &wp, &c->worker);
	if (st == SIB_OK)
		st = sib_am_register(c->worker, MCA_BTL_SOFTIB_AM_ID,
				     mca_btl_softib_recv, &mca_btl_softib_module);
	if (st == SIB_OK)
		st = sib_worker_get_address(c->worker, &addr, &alen);
	if (st != SIB_OK) {
		say("worker", st);
		goto err;
	}
	OPAL_MODEX_SEND(rc, OPAL_PMIX_GLOBAL, &c->super.btl_version, addr,
			alen);
	sib_address_free(addr);
	if (rc != OPAL_SUCCESS)
		goto err;
	if (mca_btl_softib_module_limits(&mca_btl_softib_module) !=
		    OPAL_SUCCESS ||
	    mca_btl_softib_frag_init() != OPAL_SUCCESS)
		goto err;
	mods = malloc(sizeof(*mods));
	if (!mods)
		goto err;
	mods[0] = &mca_btl_softib_module.super;
	c->module = &mca_btl_softib_module;
	*num = 1;
	return mods;
err:
	if (c->worker)
		sib_worker_destroy(c->worker);
	sib_context_destroy(c->ctx);
	c->worker = NULL;
	c->ctx = NULL;
	return NULL;
}

static int softib_progress(void)
{
	sib_worker_t *w = mca_btl_softib_component.worker;
	int n;

	if (!w)
		return 0;
	n = sib_worker_progress(w);
	if (n < 0)
		n = 0;
	return n + mca_btl_softib_atomic_progress();
}
