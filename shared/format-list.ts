/** Items for a one-line message: the first `limit`, comma-separated, then "and N more" (`a, b and 3 more`). */
export function formatList(items: readonly string[], limit = 5): string {
  return items.slice(0, limit).join(", ") + (items.length > limit ? ` and ${items.length - limit} more` : "");
}
