// What a git object holds never changes, so the runner keeps what it asked git of one (a commit's tree,
// its files) for the next time it needs it, without a process (issue 30). A few are kept, the last used;
// one that failed is forgotten, so the next caller asks again.

/** Promised values by key, at most `max` of them: the ones used last. */
export class RecentPromises<T> {
  private readonly kept = new Map<string, Promise<T>>();

  constructor(private readonly max: number) {}

  /** The value kept under `key`, or the one `make` promises, kept from now on. */
  get(key: string, make: () => Promise<T>): Promise<T> {
    return this.set(key, this.kept.get(key) ?? make());
  }

  /** The value kept under `key`, if any, without making it the one used last. */
  peek(key: string): Promise<T> | undefined {
    return this.kept.get(key);
  }

  /** Keeps `value` under `key` as the one used last. */
  set(key: string, value: Promise<T>): Promise<T> {
    this.kept.delete(key);
    this.kept.set(key, value);
    value.catch(() => {
      if (this.kept.get(key) === value) this.kept.delete(key);
    });
    for (const oldest of this.kept.keys()) {
      if (this.kept.size <= this.max) break;
      this.kept.delete(oldest);
    }
    return value;
  }
}
