#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# The test VM's first process (see qemu-noudev): hides udevd from virtme-ng's
# init, which starts it whenever /usr/lib/systemd/systemd-udevd exists, then
# becomes that init.
#
# virtme-ng's init lays writable overlays (tmpfs over the host's directory)
# on /usr and /lib (the same directory on a merged /usr). This one lays the
# /usr overlay itself, on a tmpfs under /dev (devtmpfs, the only writable
# file system yet), with a whiteout for systemd-udevd in it, and tells
# virtme-ng's init to leave /usr and /lib alone. Nothing else changes but
# systemd-tmpfiles (below): /usr stays writable, /lib/modules works, every
# other file is the host's.
# Should any step fail, the VM boots as virtme-ng boots it, with udev.
#
# virtme-ng's init also runs `systemd-tmpfiles --create --boot`, which the
# host's tmpfiles.d makes a walk over the whole system: 2 s of a boot on the
# test kernel, 21 s on the debug kernel. The tests need none of what it
# creates (the runner's cases make their own directories), so in the VM it
# is `true`.
d=/dev/.ferry-usr
if mkdir -p "$d/upper/lib/systemd" "$d/upper/bin" "$d/work" &&
	mknod "$d/upper/lib/systemd/systemd-udevd" c 0 0 &&
	ln -s /usr/bin/true "$d/upper/bin/systemd-tmpfiles" &&
	mount -t overlay -o "lowerdir=/usr,upperdir=$d/upper,workdir=$d/work" ferry-usr /usr; then
	for v in $(env | sed -n 's/^\(virtme_rw_overlay[0-9]*\)=\(\/usr\|\/lib\)$/\1/p'); do
		unset "$v"
	done
fi
exec "$ferry_init"
