// SPDX-License-Identifier: GPL-2.0
/*
 * ferry_blk_hostile: a ferry_blk client that breaks ferry_blk's protocol on
 * purpose, for the blk_hostile case (test builds only). Loaded with
 * peer=ADDR port=PORT export=NAME, it opens a session to the target's
 * service "ferry_blk", opens the export read-only, sends each malformed
 * operation below in turn and checks that the target refuses it with the
 * errno of Documentation/blk.md, then reads the export's first 4 KiB to see
 * that the session still serves. It logs "ferry_blk_hostile: WHAT: refused
 * with ERRNO" for each; loading fails (-EIO) if the target took any of them
 * or did not serve the good read. Nothing stays behind but the module.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/completion.h>
#include <linux/inet.h>
#include <linux/module.h>
#include <linux/random.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/unaligned.h>
#include <ferry/ferry.h>

static char *peer;
module_param(peer, charp, 0444);
MODULE_PARM_DESC(peer, "The target's IPv4 or IPv6 address");
static ushort port = 4791;
module_param(port, ushort, 0444);
MODULE_PARM_DESC(port, "The target's ferry listener port");
static char *export = "ram0";
module_param(export, charp, 0444);
MODULE_PARM_DESC(export, "The export to open");

/* ferry_blk's protocol, version 2 (Documentation/blk.md). */
#define BLK_VERSION	2
#define OPEN_LEN	52
#define OPENED_LEN	56
#define IO_LEN		24
#define NAME_LEN	32
enum { OP_READ = 1, OP_WRITE = 2, OP_FLUSH = 3 };
#define IO_FUA		0x1

struct hostile {
	struct ferry_session *s;
	struct page *pages[2];
	u32 handle;
	u64 sectors;
};

static void message(struct ferry_session *s, void *priv, const void *data, size_t len)
{
}

static const struct ferry_ops ops = {
	.message = message,
};

static void call_done(struct ferry_request *rq)
{
	complete(rq->priv);
}

/*
 * Sends header @hdr of @len bytes with @dlen bytes of data going @dir, and
 * waits for the answer (ferry ends every request it took: the session's
 * heartbeats bound the wait). Returns its status; @resp gets the response
 * header.
 */
static int call(struct hostile *h, const void *hdr, u32 len, enum ferry_dir dir, u32 dlen,
		void *resp, u32 resp_size)
{
	struct scatterlist sg[2];
	struct completion done;
	struct ferry_request rq = {
		.hdr = hdr, .hdr_len = len, .dir = dir, .resp = resp,
		.resp_size = resp_size, .done = call_done, .priv = &done,
	};
	int ret;

	init_completion(&done);
	if (dir != FERRY_DIR_NONE) {
		u32 first = min_t(u32, dlen, PAGE_SIZE);

		sg_init_table(sg, dlen > PAGE_SIZE ? 2 : 1);
		sg_set_page(&sg[0], h->pages[0], first, 0);
		if (dlen > PAGE_SIZE)
			sg_set_page(&sg[1], h->pages[1], dlen - first, 0);
		rq.sgl = sg;
		rq.nents = dlen > PAGE_SIZE ? 2 : 1;
	}
	ret = ferry_submit(h->s, &rq, 0);
	if (ret)
		return ret;
	wait_for_completion(&done);
	return rq.status;
}

static void io(u8 *b, u8 op, u16 flags, u32 handle, u64 sector, u32 len)
{
	memset(b, 0, IO_LEN);
	b[0] = BLK_VERSION;
	b[1] = op;
	put_unaligned_le16(flags, b + 2);
	put_unaligned_le32(handle, b + 4);
	put_unaligned_le64(sector, b + 8);
	put_unaligned_le32(len, b + 16);
}

/* Opens the export read-only: its handle and capacity. */
static int open_export(struct hostile *h)
{
	u8 open[OPEN_LEN] = { 'F', 'B', 'L', 'K', BLK_VERSION, 1 };
	u8 opened[OPENED_LEN];
	int ret;

	put_unaligned_le64(get_random_u64(), open + 8);
	strscpy((char *)open + 16, export, NAME_LEN);
	ret = call(h, open, sizeof(open), FERRY_DIR_NONE, 0, opened, sizeof(opened));
	if (ret)
		return ret;
	h->handle = get_unaligned_le32(opened + 4);
	h->sectors = get_unaligned_le64(opened + 8);
	return 0;
}

struct fault {
	const char *what;
	u8 op;
	u16 flags;
	u32 handle_xor;
	int sector;	/* 0: sector 0; 1: the capacity; 2: wraps around */
	u32 len;
	enum ferry_dir dir;
	u32 dlen;
	u32 hdr_len;	/* 0: IO_LEN */
	u8 version;	/* 0: BLK_VERSION */
	int want;
};

static const struct fault faults[] = {
	{ "unknown handle", OP_READ, 0, 0x5a5a, 0, 4096, FERRY_FROM_PEER, 4096, 0, 0, -ENODEV },
	{ "sector beyond the capacity", OP_READ, 0, 0, 1, 4096, FERRY_FROM_PEER, 4096, 0, 0, -EINVAL },
	{ "range wrapping around", OP_READ, 0, 0, 2, 4096, FERRY_FROM_PEER, 4096, 0, 0, -EINVAL },
	{ "length not in whole blocks", OP_READ, 0, 0, 0, 1000, FERRY_FROM_PEER, 1000, 0, 0, -EINVAL },
	{ "length not matching the data", OP_READ, 0, 0, 0, 8192, FERRY_FROM_PEER, 4096, 0, 0, -EINVAL },
	{ "data on a flush", OP_FLUSH, 0, 0, 0, 0, FERRY_TO_PEER, 4096, 0, 0, -EINVAL },
	{ "unknown op", 9, 0, 0, 0, 0, FERRY_DIR_NONE, 0, 0, 0, -EOPNOTSUPP },
	{ "FUA on a read", OP_READ, IO_FUA, 0, 0, 4096, FERRY_FROM_PEER, 4096, 0, 0, -EOPNOTSUPP },
	{ "write to a read-only open", OP_WRITE, 0, 0, 0, 4096, FERRY_TO_PEER, 4096, 0, 0, -EROFS },
	{ "unknown version", OP_READ, 0, 0, 0, 4096, FERRY_FROM_PEER, 4096, 0, BLK_VERSION + 1, -EOPNOTSUPP },
	{ "short header", OP_READ, 0, 0, 0, 4096, FERRY_FROM_PEER, 4096, 10, 0, -EOPNOTSUPP },
};

static int attack(struct hostile *h)
{
	u8 hdr[IO_LEN];
	int i, ret, bad = 0;

	for (i = 0; i < ARRAY_SIZE(faults); i++) {
		const struct fault *f = &faults[i];
		u64 sector = f->sector == 1 ? h->sectors : f->sector == 2 ? U64_MAX - 1 : 0;

		io(hdr, f->op, f->flags, h->handle ^ f->handle_xor, sector, f->len);
		if (f->version)
			hdr[0] = f->version;
		ret = call(h, hdr, f->hdr_len ?: IO_LEN, f->dir, f->dlen, NULL, 0);
		if (ret == f->want) {
			pr_info("%s: refused with %d\n", f->what, ret);
		} else {
			pr_err("%s: answered %d, not %d\n", f->what, ret, f->want);
			bad++;
		}
	}
	io(hdr, OP_READ, 0, h->handle, 0, 4096);
	ret = call(h, hdr, IO_LEN, FERRY_FROM_PEER, 4096, NULL, 0);
	if (ret) {
		pr_err("a good read after them: %d\n", ret);
		bad++;
	} else {
		pr_info("a good read after them: served\n");
	}
	return bad ? -EIO : 0;
}

static int __init hostile_init(void)
{
	struct ferry_session_params p = { .service = "ferry_blk", .channels = 1 };
	struct hostile *h;
	char port_str[8];
	int ret;

	if (!peer)
		return -EINVAL;
	snprintf(port_str, sizeof(port_str), "%u", port);
	ret = inet_pton_with_scope(&init_net, AF_UNSPEC, peer, port_str, &p.peer);
	if (ret)
		return ret;
	h = kzalloc(sizeof(*h), GFP_KERNEL);
	if (!h)
		return -ENOMEM;
	ret = -ENOMEM;
	h->pages[0] = alloc_page(GFP_KERNEL | __GFP_ZERO);
	h->pages[1] = alloc_page(GFP_KERNEL | __GFP_ZERO);
	if (!h->pages[0] || !h->pages[1])
		goto out;
	h->s = ferry_session_open(&p, &ops, h);
	if (IS_ERR(h->s)) {
		ret = PTR_ERR(h->s);
		goto out;
	}
	ret = open_export(h);
	if (ret)
		pr_err("opening export %s: %d\n", export, ret);
	else
		ret = attack(h);
	/* No callback runs once this returns. */
	ferry_session_close(h->s);
out:
	if (h->pages[1])
		__free_page(h->pages[1]);
	if (h->pages[0])
		__free_page(h->pages[0]);
	kfree(h);
	return ret;
}

static void __exit hostile_exit(void)
{
}

module_init(hostile_init);
module_exit(hostile_exit);
MODULE_DESCRIPTION("ferry test: a ferry_blk client that breaks the protocol on purpose");
MODULE_AUTHOR("The ferry authors");
MODULE_LICENSE("GPL");
MODULE_IMPORT_NS("FERRY");
