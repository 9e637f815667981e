/*
 * Datagrams from our own user only, on the sockets other processes reach
 * by name.
 *
 * The doorbell and the completion channels are bound to abstract AF_UNIX
 * names: such names have no file and no permission bits, so any process of
 * any user in the network namespace can send to them (and find them in
 * /proc/net/unix). What a datagram says — flush this QP, signal this CQ —
 * is only to be believed from a process of the user the segment belongs
 * to, as only those can map the segment (mode 0600) and own its objects.
 *
 * With SO_PASSCRED set on the receiving socket, the kernel attaches to
 * every datagram the sender's credentials, which the sender cannot forge
 * (an explicit SCM_CREDENTIALS is checked by the kernel: only its own ids,
 * unless it holds CAP_SETUID, which is root's already). Set before bind,
 * so no datagram reaches the socket without them. A datagram without
 * credentials, or from another uid, is dropped and counted.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hca_int.h"

int hca_sock_pass_creds(int fd)
{
	int one = 1;

	return setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) ? errno : 0;
}

static bool from_owner(struct msghdr *mh)
{
	static _Atomic long owner = -1; /* one getuid per process */
	long u = atomic_load_explicit(&owner, memory_order_relaxed);

	if (u < 0)
		atomic_store_explicit(&owner, u = (long)getuid(), memory_order_relaxed);
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		struct ucred cr;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_CREDENTIALS ||
		    c->cmsg_len < CMSG_LEN(sizeof(cr)))
			continue;
		memcpy(&cr, CMSG_DATA(c), sizeof(cr));
		return (long)cr.uid == u;
	}
	return false;
}

ssize_t hca_sock_recv_checked(int fd, void *buf, size_t len, int flags,
			      _Atomic uint64_t *foreign)
{
	union { /* aligned for cmsghdr */
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(struct ucred))];
	} ctl;
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	for (;;) {
		ssize_t n;

		mh.msg_control = ctl.b;
		mh.msg_controllen = sizeof(ctl.b);
		n = recvmsg(fd, &mh, flags | MSG_CMSG_CLOEXEC);
		if (n < 0)
			return n;
		if (!(mh.msg_flags & MSG_CTRUNC) && from_owner(&mh))
			return n;
		/* another user's: gone unread; a blocking caller waits on */
		if (foreign)
			atomic_fetch_add_explicit(foreign, 1, memory_order_relaxed);
	}
}
