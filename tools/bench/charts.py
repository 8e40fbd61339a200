#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Charts of `make bench`'s block part, from tools/bench/out/block.json:
block-ratios.svg, ferry_blk's ratio to the best peer on every row (the
median of the per-round ratios, with whiskers from the smallest to the
largest), for the headline figure (IOPS or MB/s), mean latency and CPU per
I/O; and block-scaling.svg, each system's median against queue depth,
block size and jobs, where the run measured them.

Run with the tools' Python environment (matplotlib): `make bench` does."""
import json
import os
import statistics
import sys

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {'ferry_blk': '#1f77b4', 'baseline': '#9467bd', 'nvme-rdma': '#d62728',
          'rnbd': '#2ca02c', 'local': '#7f7f7f'}


def per_round_ratios(figs, row, a, b, key):
    return [x[key] / y[key] for x, y in zip(figs[row][a], figs[row][b])
            if x and y and y[key]]


def ratios_chart(data, path):
    figs = data['figures']
    rows = [r for r in data['rows'] if data['ratios'].get(r, {}).get('best_peer')]
    if not rows:
        return False
    kinds = [('headline', 'IOPS or MB/s (higher is better)'),
             ('lat_us', 'mean latency (lower is better)'),
             ('cpu_us_per_io', 'CPU per I/O (lower is better)')]
    fig, axes = plt.subplots(1, len(kinds), figsize=(15, 0.6 * len(rows) + 2), sharey=True)
    for ax, (key, title) in zip(axes, kinds):
        meds, lo, hi = [], [], []
        for r in rows:
            best = data['ratios'][r]['best_peer']
            k = data['headline'][r] if key == 'headline' else key
            rs = per_round_ratios(figs, r, 'ferry_blk', best, k) or [float('nan')]
            m = statistics.median(rs)
            meds.append(m)
            lo.append(m - min(rs))
            hi.append(max(rs) - m)
        y = range(len(rows))
        ax.barh(y, meds, xerr=[lo, hi], color=COLORS['ferry_blk'], alpha=0.8, capsize=3)
        ax.axvline(1.0, color='black', linewidth=0.8)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel('ferry_blk / best peer')
        ax.set_yticks(list(y))
        ax.set_yticklabels([f'{r} (vs {data["ratios"][r]["best_peer"]})' for r in rows])
        ax.invert_yaxis()
    fig.suptitle(f'ferry_blk against the best of nvme-rdma and RNBD, {data["when"]}: '
                 f'median of {data["rounds"]} per-round ratios, whiskers min-max')
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def scaling_chart(data, path):
    curves = data.get('scaling') or {}
    if not curves:
        return False
    fig, axes = plt.subplots(1, len(curves), figsize=(5 * len(curves), 4))
    if len(curves) == 1:
        axes = [axes]
    for ax, (name, c) in zip(axes, curves.items()):
        for system, points in c['systems'].items():
            xs = [p['x'] for p in points if p['median'] is not None]
            ys = [p['median'] for p in points if p['median'] is not None]
            ax.plot(xs, ys, marker='o', label=system, color=COLORS.get(system))
        ax.set_xscale('log', base=2)
        ax.set_xticks(c['xs'])
        ax.set_xticklabels([str(x) for x in c['labels']])
        ax.set_title(name, fontsize=10)
        ax.set_xlabel(c['xlabel'])
        ax.set_ylabel(c['ylabel'])
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), 'out', 'block.json')
    with open(src) as f:
        data = json.load(f)
    out = os.path.dirname(src)
    for name, draw in (('block-ratios.svg', ratios_chart), ('block-scaling.svg', scaling_chart)):
        if draw(data, os.path.join(out, name)):
            print(f'chart: {os.path.join(out, name)}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
