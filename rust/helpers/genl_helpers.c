// SPDX-License-Identifier: GPL-2.0
/* See genl_helpers.h. */

#include <net/genetlink.h>
#include <net/sock.h>
#include <net/net_namespace.h>
#include <net/netlink.h>

#include "genl_helpers.h"

struct sk_buff *ferry_helper_genlmsg_new(size_t payload)
{
	return genlmsg_new(payload, GFP_KERNEL);
}

void ferry_helper_nlmsg_free(struct sk_buff *skb)
{
	nlmsg_free(skb);
}

void *ferry_helper_genlmsg_put_reply(struct sk_buff *skb,
				     struct genl_info *info)
{
	return genlmsg_put_reply(skb, info, info->family, 0,
				 info->genlhdr->cmd);
}

void *ferry_helper_genlmsg_put_dump(struct sk_buff *skb,
				    struct netlink_callback *cb)
{
	const struct genl_dumpit_info *dinfo = genl_dumpit_info(cb);

	return genlmsg_put(skb, NETLINK_CB(cb->skb).portid,
			   cb->nlh->nlmsg_seq, dinfo->info.family, NLM_F_MULTI,
			   dinfo->op.cmd);
}

void ferry_helper_genlmsg_end(struct sk_buff *skb, void *hdr)
{
	genlmsg_end(skb, hdr);
}

void ferry_helper_genlmsg_cancel(struct sk_buff *skb, void *hdr)
{
	genlmsg_cancel(skb, hdr);
}

int ferry_helper_genlmsg_reply(struct sk_buff *skb, struct genl_info *info)
{
	return genlmsg_reply(skb, info);
}

struct genl_info *ferry_helper_genl_info_dump(struct netlink_callback *cb)
{
	return (struct genl_info *)genl_info_dump(cb);
}

struct net *ferry_helper_genl_info_net(struct genl_info *info)
{
	return genl_info_net(info);
}

struct net *ferry_helper_netlink_cb_net(struct netlink_callback *cb)
{
	return sock_net(cb->skb->sk);
}

long *ferry_helper_netlink_cb_args(struct netlink_callback *cb)
{
	return cb->args;
}

const u8 *ferry_helper_skb_data(const struct sk_buff *skb)
{
	return skb->data;
}

unsigned int ferry_helper_skb_len(const struct sk_buff *skb)
{
	return skb->len;
}

int ferry_helper_nla_put_u32(struct sk_buff *skb, int type, u32 value)
{
	return nla_put_u32(skb, type, value);
}

int ferry_helper_nla_put_u64(struct sk_buff *skb, int type, u64 value, int pad)
{
	return nla_put_u64_64bit(skb, type, value, pad);
}

int ferry_helper_nla_put_string(struct sk_buff *skb, int type, const char *s)
{
	return nla_put_string(skb, type, s);
}

struct nlattr *ferry_helper_nla_nest_start(struct sk_buff *skb, int type)
{
	return nla_nest_start(skb, type);
}

void ferry_helper_nla_nest_end(struct sk_buff *skb, struct nlattr *start)
{
	nla_nest_end(skb, start);
}

void ferry_helper_nla_nest_cancel(struct sk_buff *skb, struct nlattr *start)
{
	nla_nest_cancel(skb, start);
}

void ferry_helper_nl_set_err_msg_attr(struct netlink_ext_ack *extack,
				      const struct nlattr *attr,
				      const char *msg)
{
	/* NL_SET_ERR_MSG_ATTR() wants a literal; msg is static on the Rust side. */
	if (extack)
		extack->_msg = msg;
	NL_SET_BAD_ATTR(extack, attr);
}

void ferry_helper_nl_set_err_msg(struct netlink_ext_ack *extack,
				 const char *msg)
{
	if (extack)
		extack->_msg = msg;
}

int ferry_helper_genlmsg_multicast_netns(const struct genl_family *family,
					 struct sk_buff *skb, struct net *net,
					 void *hdr, unsigned int group)
{
	genlmsg_end(skb, hdr);
	return genlmsg_multicast_netns(family, net, skb, 0, group,
				       GFP_KERNEL);
}

int ferry_helper_genlmsg_multicast_allns(const struct genl_family *family,
					 struct sk_buff *skb, void *hdr,
					 unsigned int group)
{
	genlmsg_end(skb, hdr);
	return genlmsg_multicast_allns(family, skb, 0, group);
}

void *ferry_helper_genlmsg_put_ntf(const struct genl_family *family,
				    struct sk_buff *skb, u8 cmd)
{
	return genlmsg_put(skb, 0, 0, family, 0, cmd);
}

int ferry_helper_nla_put_u16(struct sk_buff *skb, int type, u16 value)
{
	return nla_put_u16(skb, type, value);
}

int ferry_helper_nla_put(struct sk_buff *skb, int type, int len,
			 const void *data)
{
	return nla_put(skb, type, len, data);
}

void ferry_helper_nl_set_err_attr_miss(struct netlink_ext_ack *extack,
				       unsigned int type)
{
	NL_SET_ERR_ATTR_MISS(extack, NULL, type);
	NL_SET_ERR_MSG(extack, "Missing attribute");
}

void ferry_helper_get_net(struct net *net)
{
	get_net(net);
}

void ferry_helper_put_net(struct net *net)
{
	put_net(net);
}
