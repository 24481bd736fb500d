import picomatch from "picomatch/posix";

// The scope (DESIGN §6.4, first line of the guards): the globs of the paths a candidate may add, change
// or delete. Every other path is off limits, whatever the protected set says. Matching is POSIX
// (picomatch's posix build: no Node or Workers globals) and leaves dotfiles out unless a glob names the
// dot itself: `src/**` does not admit `src/.babelrc`, which configures the tools the check runs as
// surely as a root `.npmrc` does.

const matchers = new WeakMap<readonly string[], (path: string) => boolean>();

function matcherOf(scope: readonly string[]): (path: string) => boolean {
  let match = matchers.get(scope);
  if (!match) {
    match = picomatch([...scope], { dot: false });
    matchers.set(scope, match);
  }
  return match;
}

/** Whether the scope admits a change to `path` (relative to the repository, `/`-separated). */
export function inScope(scope: readonly string[], path: string): boolean {
  return matcherOf(scope)(path);
}

/** The paths of `paths` that the scope does not admit, in their order. */
export function outOfScope(scope: readonly string[], paths: readonly string[]): string[] {
  const match = matcherOf(scope);
  return paths.filter((path) => !match(path));
}
