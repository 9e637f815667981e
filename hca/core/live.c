/*
 * Is a peer process dead? Only proof counts (issue 15 item 3): a peer
 * taken for dead is reclaimed — its QPs, CQs and memory keys freed under
 * it while it runs — so anything short of proof answers "unknown", and
 * the question is asked again later.
 *
 * Proof of death, for the process recorded in a slot as (pid, start time):
 *  - its pidfd (opened while the start time matched) is readable: it
 *    exited;
 *  - kill(pid, 0) or /proc/<pid>/stat says no such process (ESRCH,
 *    ENOENT);
 *  - /proc/<pid>/stat names another start time (the pid was reused).
 * Not proof: EMFILE or ENFILE from pidfd_open or open (the checker is
 * short of file descriptors), ENOMEM, EACCES, a short read — "unknown".
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hca_int.h"

static int pidfd_open_(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* Has the process behind a pidfd exited? */
static bool pidfd_exited(int fd)
{
	struct pollfd pf = { .fd = fd, .events = POLLIN };

	return poll(&pf, 1, 0) == 1 && (pf.revents & (POLLIN | POLLHUP));
}

/* What /proc says of (pid, start): HCA_LIVE_YES, _DEAD or _UNKNOWN. */
static enum hca_live stat_says(pid_t pid, uint64_t start)
{
	uint64_t st;
	int rc = hca_proc_stat(pid, &st, NULL);

	if (rc == ENOENT || rc == ESRCH)
		return HCA_LIVE_DEAD;
	if (rc)
		return HCA_LIVE_UNKNOWN;
	/* a zombie leader ('Z') may still have live threads: only its
	 * pidfd tells when the whole process has gone */
	if (st != start)
		return HCA_LIVE_DEAD;
	return HCA_LIVE_YES;
}

enum hca_live hca_proc_live(pid_t pid, uint64_t start, int pidfd)
{
	if (pid <= 0)
		return HCA_LIVE_UNKNOWN; /* a slot is LIVE only with its pid set */
	if (pidfd >= 0 && pidfd_exited(pidfd))
		return HCA_LIVE_DEAD;
	if (kill(pid, 0) && errno == ESRCH)
		return HCA_LIVE_DEAD;
	return stat_says(pid, start);
}

/*
 * Open a pidfd on (pid, start) that from now on tells of its death.
 * Returns the verdict; *fdp is the pidfd (>= 0) only with HCA_LIVE_YES.
 * The start time is checked after the pidfd is open, so the pidfd is
 * that process's and not a later one's that reused the pid.
 */
enum hca_live hca_proc_watch(pid_t pid, uint64_t start, int *fdp)
{
	enum hca_live v;
	int fd;

	*fdp = -1;
	if (pid <= 0)
		return HCA_LIVE_UNKNOWN;
	fd = pidfd_open_(pid);
	if (fd < 0)
		return errno == ESRCH ? HCA_LIVE_DEAD : hca_proc_live(pid, start, -1);
	v = hca_proc_live(pid, start, fd);
	if (v == HCA_LIVE_YES)
		*fdp = fd;
	else
		close(fd);
	return v;
}
