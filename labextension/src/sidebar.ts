/**
 * The left-sidebar panel "Kubeflow Trainer": backend / namespace switch,
 * live jobs list (polling with back-off, paused while hidden), runtimes.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { refreshIcon } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import * as api from './api';
import { h, setBadge, statusBadge } from './dom';
import { trainerIcon } from './icon';
import {
  displayStatus,
  failureText,
  filterJobs,
  formatAge,
  formatNodes,
  formatTime,
  IBackendInfo,
  IJob,
  IRuntime,
  sortJobs,
  statusKey
} from './jobs';
import { Poller } from './poller';
import { progressText } from './progress';
import { runtimeGroups } from './runtimelist';

export interface IOpenJobArgs extends api.ITarget {
  name: string;
}

/** The jobs selected for comparison (the sidebar's Compare button). */
export interface ICompareArgs extends api.ITarget {
  names: string[];
}

export class TrainerSidebar extends Widget {
  constructor() {
    super();
    this.id = 'kf-jupyter-sidebar';
    this.addClass('kf-Sidebar');
    this.title.icon = trainerIcon;
    this.title.caption = 'Kubeflow Trainer';
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', 'Kubeflow Trainer');
    this._build();
    this._poller = new Poller(() => this._fetchJobs(), {
      onTick: (error, delay) => this._onTick(error, delay)
    });
    this._ageTimer = window.setInterval(() => this._updateAges(), 15000);
    document.addEventListener('visibilitychange', this._onVisibility);
  }

  /** Emitted when the user opens a job. */
  get openRequested(): ISignal<this, IOpenJobArgs> {
    return this._openRequested;
  }

  /** Emitted when the user compares the selected jobs. */
  get compareRequested(): ISignal<this, ICompareArgs> {
    return this._compareRequested;
  }

  get target(): api.ITarget {
    return { ...this._target };
  }

  get jobs(): IJob[] {
    return this._jobs.slice();
  }

  /** Refresh backends, runtimes and jobs now. */
  async refresh(): Promise<void> {
    await this._loadBackends();
    await Promise.all([this._poller.refresh(), this._fetchRuntimes()]);
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poller.dispose();
    window.clearInterval(this._ageTimer);
    document.removeEventListener('visibilitychange', this._onVisibility);
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    if (!this._started) {
      this._started = true;
      void this._loadBackends().then(() => {
        void this._fetchRuntimes();
        void this._poller.start();
      });
    } else if (!document.hidden) {
      void this._poller.resume();
    }
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this._poller.pause();
  }

  private _onVisibility = (): void => {
    if (document.hidden) {
      this._poller.pause();
    } else if (this.isVisible && this._started) {
      void this._poller.resume();
    }
  };

  // ---------------------------------------------------------------- building

  private _build(): void {
    const refresh = h('button', {
      className: 'kf-icon-button jp-Button jp-mod-minimal',
      type: 'button',
      title: 'Refresh',
      'aria-label': 'Refresh Kubeflow Trainer'
    });
    refreshIcon.element({ container: refresh, tag: 'span', elementSize: 'normal' });
    refresh.addEventListener('click', () => void this.refresh());

    const header = h(
      'div',
      { className: 'kf-Sidebar-header' },
      h('h2', { className: 'kf-Sidebar-title' }, 'Kubeflow Trainer'),
      refresh
    );

    this._backendSelect = h('select', { className: 'kf-select jp-mod-styled', 'aria-label': 'Backend' });
    this._backendSelect.addEventListener('change', () => this._setTarget(this._backendSelect.value));
    this._namespaceInput = h('input', {
      className: 'kf-input jp-mod-styled',
      type: 'text',
      placeholder: 'namespace',
      'aria-label': 'Kubernetes namespace',
      spellcheck: 'false'
    });
    this._namespaceInput.addEventListener('change', () => this._setTarget(this._target.backend));
    this._namespaceInput.addEventListener('keydown', e => {
      if (e.key === 'Enter') {
        this._setTarget(this._target.backend);
      }
    });
    this._backendNote = h('div', { className: 'kf-note', 'aria-live': 'polite' });
    const targetRow = h(
      'div',
      { className: 'kf-Sidebar-target' },
      h('label', { className: 'kf-label' }, 'Backend', this._backendSelect),
      h('label', { className: 'kf-label kf-namespace' }, 'Namespace', this._namespaceInput)
    );

    this._error = h('div', { className: 'kf-error', role: 'alert', hidden: true });

    this._filter = h('input', {
      className: 'kf-input jp-mod-styled kf-filter',
      type: 'search',
      placeholder: 'Filter jobs',
      title: 'Filter jobs by name, status or framework (status:running, framework:torch)',
      'aria-label': 'Filter jobs by name, status or framework'
    });
    this._filter.addEventListener('input', () => this._renderJobs());

    this._jobsCount = h('span', { className: 'kf-count' });
    this._compare = h(
      'button',
      { className: 'jp-Button jp-mod-styled kf-compare-button', type: 'button', disabled: true },
      'Compare'
    );
    this._compare.addEventListener('click', () => {
      const names = this._jobs.map(j => j.name).filter(n => this._selected.has(n));
      if (names.length >= 2) {
        this._compareRequested.emit({ ...this._target, names });
      }
    });
    this._renderCompare();
    this._jobsList = h('ul', { className: 'kf-jobs', 'aria-label': 'Training jobs' });
    // Until the first answer the list is loading, not empty: "No jobs yet" only once the
    // backend has said so (it read as "your jobs are gone" for seconds after a reload).
    this._jobsEmpty = h('div', { className: 'kf-empty kf-loading', role: 'status' }, 'Loading jobs…');
    this._status = h('div', { className: 'kf-status', 'aria-live': 'polite' });

    this._runtimes = h('div', { className: 'kf-runtimes', 'aria-label': 'Training runtimes' });

    const jobsSection = h(
      'section',
      { className: 'kf-section', 'aria-label': 'Jobs' },
      h('h3', { className: 'kf-section-title' }, 'Jobs ', this._jobsCount, this._compare),
      this._filter,
      this._jobsList,
      this._jobsEmpty,
      this._status
    );
    const runtimesSection = h(
      'section',
      { className: 'kf-section', 'aria-label': 'Runtimes' },
      h('h3', { className: 'kf-section-title' }, 'Runtimes'),
      this._runtimes
    );
    this.node.append(header, targetRow, this._backendNote, this._error, jobsSection, runtimesSection);
  }

  // ---------------------------------------------------------------- data

  private async _loadBackends(): Promise<void> {
    try {
      const reply = await api.listBackends();
      this._backends = reply.backends ?? [];
      const current = this._backends.find(b => b.name === this._target.backend);
      if (!current) {
        this._target.backend = reply.default || this._backends[0]?.name || 'local';
      }
      const k8s = this._backends.find(b => b.name === 'kubernetes');
      if (!this._namespaceInput.value && k8s?.namespace) {
        this._namespaceInput.value = k8s.namespace;
      }
      this._renderBackends();
      this._showError(null);
    } catch (e) {
      this._showError(e);
    }
  }

  private _setTarget(backend: string): void {
    const namespace = this._namespaceInput.value.trim() || null;
    if (backend === this._target.backend && namespace === (this._target.namespace ?? null)) {
      return;
    }
    this._target = { backend, namespace };
    this._jobs = [];
    this._loaded = false;
    this._rows.clear();
    this._selected.clear();
    this._renderCompare();
    this._jobsList.textContent = '';
    this._renderBackends();
    this._renderJobs();
    void this._fetchRuntimes();
    void this._poller.refresh();
  }

  private async _fetchJobs(): Promise<void> {
    const target = { ...this._target };
    const jobs = await api.listJobs(target);
    if (target.backend !== this._target.backend || target.namespace !== this._target.namespace) {
      return; // switched meanwhile
    }
    this._jobs = sortJobs(jobs);
    this._loaded = true;
    this._renderJobs();
  }

  private async _fetchRuntimes(): Promise<void> {
    const target = { ...this._target };
    try {
      const runtimes = await api.listRuntimes(target);
      if (target.backend === this._target.backend && target.namespace === this._target.namespace) {
        this._renderRuntimes(runtimes);
      }
    } catch (e) {
      this._runtimes.textContent = '';
      this._runtimes.append(h('div', { className: 'kf-error-inline' }, messageOf(e)));
    }
  }

  private _onTick(error: unknown, delay: number): void {
    this._showError(error);
    if (error) {
      this._status.textContent = `Retrying in ${Math.round(delay / 1000)} s`;
    } else {
      this._status.textContent = '';
    }
  }

  private _showError(error: unknown): void {
    if (!error) {
      this._error.hidden = true;
      this._error.textContent = '';
      return;
    }
    this._error.hidden = false;
    this._error.textContent = messageOf(error);
  }

  // ---------------------------------------------------------------- rendering

  private _renderBackends(): void {
    const sel = this._backendSelect;
    sel.textContent = '';
    const backends: IBackendInfo[] = this._backends.length ? this._backends : [{ name: 'local', available: true }];
    for (const b of backends) {
      const opt = h('option', { value: b.name }, b.available ? b.name : `${b.name} (unavailable)`);
      opt.selected = b.name === this._target.backend;
      sel.append(opt);
    }
    const current = backends.find(b => b.name === this._target.backend);
    const isK8s = this._target.backend === 'kubernetes';
    (this._namespaceInput.parentElement as HTMLElement).hidden = !isK8s;
    this._backendNote.textContent = current && !current.available && current.error ? current.error : '';
  }

  private _renderJobs(): void {
    const shown = filterJobs(this._jobs, this._filter.value);
    const now = Date.now();
    const keep = new Set(shown.map(j => j.name));
    const exists = new Set(this._jobs.map(j => j.name));
    for (const name of Array.from(this._selected)) {
      if (!exists.has(name)) {
        this._selected.delete(name); // deleted: no longer selectable
      }
    }
    this._renderCompare();
    for (const [name, row] of this._rows) {
      if (!keep.has(name)) {
        row.el.remove();
        this._rows.delete(name);
      }
    }
    let prev: Element | null = null;
    for (const job of shown) {
      let row = this._rows.get(job.name);
      if (!row) {
        row = this._createRow(job);
        this._rows.set(job.name, row);
      }
      this._updateRow(row, job, now);
      const expected: Element | null = prev ? prev.nextElementSibling : this._jobsList.firstElementChild;
      if (expected !== row.el) {
        if (prev) {
          prev.after(row.el);
        } else {
          this._jobsList.prepend(row.el);
        }
      }
      prev = row.el;
    }
    this._jobsCount.textContent =
      shown.length === this._jobs.length ? `(${this._jobs.length})` : `(${shown.length} of ${this._jobs.length})`;
    this._jobsEmpty.hidden = this._jobs.length > 0;
    this._jobsEmpty.classList.toggle('kf-loading', !this._loaded);
    this._jobsEmpty.textContent = this._loaded
      ? 'No jobs yet. Run a %%torchtrain cell to start one.'
      : 'Loading jobs…';
    this._jobsList.setAttribute('aria-busy', this._loaded ? 'false' : 'true');
  }

  private _createRow(job: IJob): IRow {
    const open = h('button', {
      className: 'kf-job-name',
      type: 'button',
      title: `Open ${job.name}: logs, status and metrics`,
      'aria-label': `Open job ${job.name}`
    }, job.name);
    open.addEventListener('click', () =>
      this._openRequested.emit({ ...this._target, name: job.name })
    );
    const badge = statusBadge(displayStatus(job), statusKey(displayStatus(job)));
    const framework = h('span', { className: 'kf-job-framework', title: 'framework' });
    const nodes = h('span', { className: 'kf-job-nodes', title: 'nodes × processes per node' });
    const age = h('span', { className: 'kf-job-age' });
    const progress = h('span', { className: 'kf-job-progress', title: 'progress reported by the training' });
    const meta = h('div', { className: 'kf-job-meta' }, framework, nodes, progress, age);
    const del = h('button', {
      className: 'kf-icon-button kf-job-delete jp-Button jp-mod-minimal',
      type: 'button',
      title: `Delete ${job.name}`,
      'aria-label': `Delete job ${job.name}`
    }, '\u2715');
    del.addEventListener('click', () => void this._confirmDelete(job.name));
    const pick = h('input', {
      type: 'checkbox',
      className: 'kf-job-select',
      title: `Select ${job.name} to compare its metrics with other jobs`,
      'aria-label': `Select job ${job.name} for comparison`
    });
    pick.checked = this._selected.has(job.name);
    pick.addEventListener('change', () => {
      if (pick.checked) {
        this._selected.add(job.name);
      } else {
        this._selected.delete(job.name);
      }
      this._renderCompare();
    });
    const el = h('li', { className: 'kf-job' }, pick, open, badge, del, meta);
    return { el, badge, framework, nodes, age, progress, creation: job.creation_time ?? null };
  }

  private _updateRow(row: IRow, job: IJob, now: number): void {
    const label = displayStatus(job);
    setBadge(row.badge, label, statusKey(label));
    const tip = label === 'Cancelled' ? '' : failureText(job) ?? [job.reason, job.message].filter(Boolean).join(': ');
    row.badge.title = tip ? `Status: ${label} (${tip})` : `Status: ${label}`;
    row.framework.textContent = job.framework || '-';
    row.nodes.textContent = formatNodes(job);
    row.progress.textContent = progressText(job.trainer_status, job.status);
    row.progress.hidden = row.progress.textContent === '';
    row.creation = job.creation_time ?? null;
    row.age.textContent = formatAge(row.creation, now);
    row.age.title = row.creation ? `created ${formatTime(row.creation)}` : '';
  }

  private _updateAges(): void {
    const now = Date.now();
    for (const row of this._rows.values()) {
      row.age.textContent = formatAge(row.creation, now);
    }
  }

  /** Compare: enabled with two or more jobs selected; it says how many. */
  private _renderCompare(): void {
    const n = this._selected.size;
    this._compare.disabled = n < 2;
    this._compare.textContent = n >= 2 ? `Compare (${n})` : 'Compare';
    this._compare.title =
      n >= 2 ? `Overlay the metrics of the ${n} selected jobs` : 'Select two or more jobs (their check boxes) to compare their metrics';
  }

  private _renderRuntimes(runtimes: IRuntime[]): void {
    this._runtimes.textContent = '';
    this._runtimes.append(...runtimeGroups(runtimes));
  }

  private async _confirmDelete(name: string): Promise<void> {
    const target = { ...this._target };
    const result = await showDialog({
      title: 'Delete training job',
      body: `Delete job "${name}" from ${target.backend}${target.namespace ? ` (namespace ${target.namespace})` : ''}? Its processes are stopped and its logs removed.`,
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Delete' })]
    });
    if (!result.button.accept) {
      return;
    }
    try {
      await api.deleteJob(target, name);
      this._jobs = this._jobs.filter(j => j.name !== name);
      this._renderJobs();
      void this._poller.refresh();
    } catch (e) {
      this._showError(e);
    }
  }

  private _backends: IBackendInfo[] = [];
  private _target: api.ITarget = { backend: '', namespace: null };
  private _jobs: IJob[] = [];
  private _rows = new Map<string, IRow>();
  private _poller: Poller;
  private _loaded = false;
  private _started = false;
  private _ageTimer: number;
  private _openRequested = new Signal<this, IOpenJobArgs>(this);
  private _compareRequested = new Signal<this, ICompareArgs>(this);
  private _selected = new Set<string>();
  private _compare!: HTMLButtonElement;
  private _backendSelect!: HTMLSelectElement;
  private _namespaceInput!: HTMLInputElement;
  private _backendNote!: HTMLDivElement;
  private _error!: HTMLDivElement;
  private _filter!: HTMLInputElement;
  private _jobsCount!: HTMLSpanElement;
  private _jobsList!: HTMLUListElement;
  private _jobsEmpty!: HTMLDivElement;
  private _status!: HTMLDivElement;
  private _runtimes!: HTMLDivElement;
}

interface IRow {
  el: HTMLLIElement;
  badge: HTMLSpanElement;
  framework: HTMLSpanElement;
  nodes: HTMLSpanElement;
  age: HTMLSpanElement;
  progress: HTMLSpanElement;
  creation: string | null;
}

export function messageOf(e: unknown): string {
  if (e instanceof Error) {
    return e.message;
  }
  return String(e);
}
