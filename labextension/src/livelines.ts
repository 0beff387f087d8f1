/**
 * The lines sources are still writing (a tqdm bar redrawn with `\r`), shown at the end of a
 * log view and updated in place: what a terminal shows while the bar runs. The finished line
 * replaces it when the source's line ends (ReadableLog in logparse.ts decides both).
 */

import { ILogRecord, sortSources } from './logparse';

export class LiveLines {
  /** The element a view keeps as the last child of its scrolling log. */
  readonly node: HTMLDivElement;

  constructor() {
    this.node = document.createElement('div');
    this.node.className = 'kf-log-live';
  }

  /** Show `live` (source -> line) for the sources `shown` accepts; a no-op when unchanged. */
  render(
    live: ReadonlyMap<string, string>,
    shown: (source: string) => boolean,
    lineNode: (rec: ILogRecord) => HTMLElement
  ): void {
    const recs = sortSources([...live.keys()].filter(shown)).map(source => ({
      source,
      line: live.get(source) ?? ''
    }));
    const key = JSON.stringify(recs);
    if (key === this._key) {
      return;
    }
    this._key = key;
    this.node.replaceChildren(
      ...recs.map(rec => {
        const el = lineNode(rec);
        el.classList.add('kf-log-line-live');
        return el;
      })
    );
  }

  /** Forget what was shown (the view was emptied), so the next render draws again. */
  reset(): void {
    this._key = '';
    this.node.replaceChildren();
  }

  private _key = '';
}
