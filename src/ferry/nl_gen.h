/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR BSD-3-Clause) */
/* Do not edit directly, auto-generated from: */
/*	Documentation/netlink/specs/ferry.yaml */
/* YNL-GEN kernel header */
/* To regenerate run: tools/net/ynl/ynl-regen.sh */

#ifndef _LINUX_FERRY_GEN_H
#define _LINUX_FERRY_GEN_H

#include <net/netlink.h>
#include <net/genetlink.h>

#include <uapi/linux/ferry.h>

int ferry_nl_device_get_doit(struct sk_buff *skb, struct genl_info *info);
int ferry_nl_device_get_dumpit(struct sk_buff *skb,
			       struct netlink_callback *cb);
int ferry_nl_listener_add_doit(struct sk_buff *skb, struct genl_info *info);
int ferry_nl_listener_del_doit(struct sk_buff *skb, struct genl_info *info);
int ferry_nl_listener_get_doit(struct sk_buff *skb, struct genl_info *info);
int ferry_nl_listener_get_dumpit(struct sk_buff *skb,
				 struct netlink_callback *cb);
int ferry_nl_session_connect_doit(struct sk_buff *skb, struct genl_info *info);
int ferry_nl_session_disconnect_doit(struct sk_buff *skb,
				     struct genl_info *info);
int ferry_nl_session_get_doit(struct sk_buff *skb, struct genl_info *info);
int ferry_nl_session_get_dumpit(struct sk_buff *skb,
				struct netlink_callback *cb);
int ferry_nl_service_get_dumpit(struct sk_buff *skb,
				struct netlink_callback *cb);
int ferry_nl_key_add_doit(struct sk_buff *skb, struct genl_info *info);
int ferry_nl_key_del_doit(struct sk_buff *skb, struct genl_info *info);
int ferry_nl_key_get_dumpit(struct sk_buff *skb, struct netlink_callback *cb);

enum {
	FERRY_NLGRP_EVENTS,
};

extern struct genl_family ferry_nl_family;

#endif /* _LINUX_FERRY_GEN_H */
