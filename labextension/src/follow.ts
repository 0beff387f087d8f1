/**
 * "Follow the end" for a scrolling log view: it follows while the user is at
 * the bottom, stops when the user scrolls up, and follows again when the user
 * scrolls back down. Only scrolls the user makes count: appending or trimming
 * lines also fires `scroll` events.
 */

/** Whether a scroll position is at the end (within `slack` pixels). */
export function isAtBottom(scrollHeight: number, scrollTop: number, clientHeight: number, slack = 4): boolean {
  return scrollHeight - scrollTop - clientHeight < slack;
}

/** Keeps `following` in step with the user's scrolling of `node`. */
export class FollowTracker {
  following = true;

  constructor(
    readonly node: HTMLElement,
    private readonly _onChange: (following: boolean) => void = () => undefined
  ) {
    const markUser = (): void => {
      this._userUntil = Date.now() + 600;
    };
    for (const type of ['wheel', 'pointerdown', 'touchmove', 'keydown']) {
      node.addEventListener(type, markUser, { passive: true });
    }
    node.addEventListener('scroll', () => {
      if (Date.now() > this._userUntil) {
        return;
      }
      this.set(isAtBottom(node.scrollHeight, node.scrollTop, node.clientHeight));
    });
  }

  /** Follow (true) or stop following (false); following scrolls to the end now. */
  set(following: boolean): void {
    if (following !== this.following) {
      this.following = following;
      this._onChange(following);
    }
    this.scroll();
  }

  /** Scroll to the end if following. */
  scroll(): void {
    if (this.following) {
      this.node.scrollTop = this.node.scrollHeight;
    }
  }

  private _userUntil = 0;
}
