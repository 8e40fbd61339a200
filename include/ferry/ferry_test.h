/* SPDX-License-Identifier: GPL-2.0 */
/*
 * ferry's test hooks: present only in test builds (CONFIG_FERRY_KUNIT_TEST),
 * for test modules such as tools/testing/hostile/ferry_hostile.c.
 */
#ifndef _FERRY_FERRY_TEST_H
#define _FERRY_FERRY_TEST_H

#include <ferry/ferry.h>

/* The breaches of the protocol ferry_test_misbehave() commits, once each. */
enum ferry_fault {
	FERRY_FAULT_UNKNOWN_KIND = 1,	/* next message: a kind that does not exist */
	FERRY_FAULT_LYING_LENGTH = 2,	/* next message: header claims 64 bytes more */
	FERRY_FAULT_OVER_GRANT = 3,	/* next message: grants 65535 credits */
	FERRY_FAULT_STRAY_RESPONSE = 4,	/* now: a response to no request */
	FERRY_FAULT_LYING_REQUEST = 5,	/* next request: claims 4 KiB more data */
	FERRY_FAULT_FORGED_KEY = 6,	/* next RDMA: a key the peer never gave */
	FERRY_FAULT_STALE_KEY = 7,	/* next RDMA: the previous transfer's key */
	FERRY_FAULT_BEYOND_REGION = 8,	/* next RDMA: right key, bytes after the region */
	FERRY_FAULT_OVERSIZED = 9,	/* next message: beyond the largest agreed */
	FERRY_FAULT_FORGED_SERVER_PROOF = 10, /* next hello reply: a wrong proof of the key */
	FERRY_FAULT_PARTIAL_POST = 11,	/* next request with registrations: posted as a
					 * driver that refuses its send would */
	FERRY_FAULT_PARTIAL_RDMA = 12,	/* next RDMA of several work requests: posted
					 * as a driver that refuses the last would */
	FERRY_FAULT_REPLAYED_CLIENT_PROOF = 13, /* next hello: the last one's proof
						 * of the key, replayed */
	FERRY_FAULT_SLOW_CHANNELS = 14,	/* next connect attempt: channels 0 and 1
					 * each wait 6 s before building their QPs,
					 * and 6 s before connecting */
};

/**
 * ferry_test_misbehave() - make a session break the protocol
 * @s: the session.
 * @fault: an &enum ferry_fault.
 *
 * Arms @fault on @s; it is committed once, on the next occasion that fits it
 * on any of the session's channels (the peer then closes the connection). A
 * stray response leaves at once, on the first channel that is up.
 *
 * Return: 0, -EINVAL for an unknown @fault, -ENOTCONN for a stray response
 * without a channel up.
 */
int ferry_test_misbehave(struct ferry_session *s, u32 fault);

#endif /* _FERRY_FERRY_TEST_H */
