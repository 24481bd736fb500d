// Sorted lists of test ids, read without sets. A suite's ids arrive sorted (UTF-16 code unit order, as
// `sort()` and `<` order strings: the runner sorts each list it sends), and a hash set of 100,000 of them
// costs tens of milliseconds to build, each id hashed once: for what a large creation or report asks of
// the whole suite — merging its lists, checking a few ids against it, what differs between two versions
// of it — one walk or a binary search of the sorted lists costs less (issue 30).

/** Whether a sorted list holds `id`: a binary search. */
export function containsSorted(sorted: readonly string[], id: string): boolean {
  let low = 0;
  let high = sorted.length - 1;
  while (low <= high) {
    const middle = (low + high) >>> 1;
    const at = sorted[middle] as string;
    if (at === id) return true;
    if (at < id) low = middle + 1;
    else high = middle - 1;
  }
  return false;
}

/** Whether ids are sorted (UTF-16 order, as `sort()` orders them) without repeats. */
export function isStrictlyAscending(ids: readonly string[]): boolean {
  for (let index = 1; index < ids.length; index++) if (!((ids[index - 1] as string) < (ids[index] as string))) return false;
  return true;
}

/** Sorted lists merged into one sorted list without repeats: linear. */
export function mergeSorted(lists: readonly (readonly string[])[]): string[] {
  return lists.reduce<readonly string[]>((merged, list) => mergeTwo(merged, list), []) as string[];
}

/**
 * Two sorted lists merged without repeats, by index and with no iterator: t0's lists are one of nearly
 * every id and two short ones, and a generic k-way merge spent 25 ms on 100,000 ids (issue 30).
 */
function mergeTwo(a: readonly string[], b: readonly string[]): readonly string[] {
  if (b.length === 0) return a;
  if (a.length === 0) return b;
  const merged: string[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    const x = a[i] as string;
    const y = b[j] as string;
    if (x < y) {
      merged.push(x);
      i++;
    } else if (y < x) {
      merged.push(y);
      j++;
    } else {
      merged.push(x);
      i++;
      j++;
    }
  }
  while (i < a.length) merged.push(a[i++] as string);
  while (j < b.length) merged.push(b[j++] as string);
  return merged;
}

/** The ids only in `a` and those only in `b`, of two sorted lists without repeats: one walk of both. */
export function sortedDifference(a: readonly string[], b: readonly string[]): { onlyA: string[]; onlyB: string[] } {
  const onlyA: string[] = [];
  const onlyB: string[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    const x = a[i] as string;
    const y = b[j] as string;
    if (x === y) {
      i++;
      j++;
    } else if (x < y) {
      onlyA.push(x);
      i++;
    } else {
      onlyB.push(y);
      j++;
    }
  }
  while (i < a.length) onlyA.push(a[i++] as string);
  while (j < b.length) onlyB.push(b[j++] as string);
  return { onlyA, onlyB };
}
