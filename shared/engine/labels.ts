import type { Labels } from "../wire/contract.js";

/**
 * Whether a runner's labels satisfy a job's (DESIGN §11): every required key is offered with the same
 * value; extra offered labels do not matter. Own keys only, so `constructor` or `toString` is a label
 * like any other and never one an object inherits.
 */
export function labelsSatisfy(required: Readonly<Labels>, offered: Readonly<Labels>): boolean {
  return Object.entries(required).every(([key, value]) => Object.hasOwn(offered, key) && offered[key] === value);
}

/** Labels as `--labels` takes them, `gpu=h100,os=linux`; `none` for an empty set. */
export function formatLabels(labels: Readonly<Labels>): string {
  return (
    Object.entries(labels)
      .map(([key, value]) => `${key}=${value}`)
      .join(",") || "none"
  );
}
