/** The sidebar's runtimes list: one group per framework, one item per runtime. */
import { h } from './dom';
import { groupRuntimes, IRuntime } from './jobs';

/** The muted tag a runtime gets when this backend cannot run it, with the reason as tooltip. */
export function clusterOnlyTag(r: IRuntime): HTMLSpanElement | null {
  if (r.runs_here !== false) {
    return null;
  }
  const reason = r.unsupported_reason || 'This backend cannot run this runtime; run it on a cluster.';
  return h('span', { className: 'kf-runtime-tag', title: reason, 'aria-label': `cluster only: ${reason}` }, 'cluster only');
}

/** The tag a runtime brought by a kf-jupyter plugin gets: "plugin <name>". */
export function pluginTag(r: IRuntime): HTMLSpanElement | null {
  if (!r.plugin) {
    return null;
  }
  const title = `From the kf-jupyter plugin ${r.plugin} (%kf_plugins lists what it adds)`;
  return h('span', { className: 'kf-runtime-tag kf-runtime-plugin', title, 'aria-label': title }, `plugin ${r.plugin}`);
}

/** One runtime's list item: name (with its tags), node count, image. */
export function runtimeItem(r: IRuntime): HTMLLIElement {
  const classes = ['kf-runtime'];
  if (r.deprecated) {
    classes.push('kf-deprecated');
  }
  if (r.runs_here === false) {
    classes.push('kf-runtime-elsewhere');
  }
  return h(
    'li',
    { className: classes.join(' '), tabindex: '0' },
    h(
      'span',
      { className: 'kf-runtime-label' },
      h('span', { className: 'kf-runtime-name' }, r.name + (r.deprecated ? ' (deprecated)' : '')),
      clusterOnlyTag(r),
      pluginTag(r)
    ),
    h('span', { className: 'kf-runtime-nodes', title: 'nodes' }, `${r.num_nodes ?? '-'} node${r.num_nodes === 1 ? '' : 's'}`),
    h('span', { className: 'kf-runtime-image', title: r.image ?? '' }, r.image ?? '')
  );
}

/** The whole list: `details` per framework, or a "No runtimes found." note. */
export function runtimeGroups(runtimes: IRuntime[]): HTMLElement[] {
  const groups = groupRuntimes(runtimes);
  if (!groups.length) {
    return [h('div', { className: 'kf-empty' }, 'No runtimes found.')];
  }
  return groups.map(g =>
    h(
      'details',
      { className: 'kf-runtime-group', open: true },
      h('summary', {}, `${g.framework} (${g.runtimes.length})`),
      h('ul', { className: 'kf-runtime-list' }, ...g.runtimes.map(runtimeItem))
    )
  );
}
