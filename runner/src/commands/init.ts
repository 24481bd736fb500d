import { existsSync } from "node:fs";
import { appendFile, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { UserError } from "../errors.js";
import { repoRoot } from "../git.js";
import { emitResult, type OutputMode } from "../output.js";

/** A guess at the project's test command, for the starter contract; empty when there is no telling. */
async function guessTestCommand(repo: string): Promise<string> {
  const manifest = await readFile(path.join(repo, "package.json"), "utf8").catch(() => null);
  if (manifest) {
    const scripts = (JSON.parse(manifest) as { scripts?: Record<string, string> }).scripts ?? {};
    if (scripts.test) {
      // The clone holds only what git tracks, so dependencies are installed there first.
      return existsSync(path.join(repo, "package-lock.json")) ? "npm ci --no-audit --no-fund && npm test" : "npm install --no-audit --no-fund && npm test";
    }
  }
  if (existsSync(path.join(repo, "pyproject.toml")) || existsSync(path.join(repo, "pytest.ini"))) return "python3 -m pytest -q";
  if (existsSync(path.join(repo, "Cargo.toml"))) return "cargo test";
  if (existsSync(path.join(repo, "go.mod"))) return "go test ./...";
  return "";
}

const yamlString = (text: string) => (text === "" ? '""' : JSON.stringify(text));

/** The commented starter contract for check_fixpoint mode. */
export function starterContract(options: { name: string; test: string; agent: string }): string {
  return `# loopwarden contract (DESIGN §5). Validated strictly: an unknown key is an error, never ignored.
# Keep it committed: its hash is pinned when a loop starts, and a changed contract is a new loop.
name: ${yamlString(options.name)}
mode: check_fixpoint        # the loop succeeds when every gate passes, with no passing test lost on the way
objective: make every test pass without weakening any test

gates:                      # run in order in a fresh clone of each candidate; the first hard failure stops the rest
  - name: test
    run: ${yamlString(options.test)}${options.test ? "" : "   # your test command, e.g. npm ci && npm test"}
    timeout: 10m
    # With per-test ids, fixing some of several failing tests counts as progress:
    # tests: { junit: .loopwarden/out/junit.xml }    # or { tap: PATH }, written by the command above
  # - name: lint            # a soft gate is judged on a METRIC line its command prints ("METRIC lint_errors=0"),
  #   run: ./scripts/lint-count.sh        # not on its exit code, and never stops the gates after it
  #   soft: { metric: lint_errors, max: 0 }

stop:
  max_iterations: 50        # one iteration = one agent run and the verdict on its change
  no_progress: 10           # halt after this many iterations in a row without a promotion

agent:                      # runs in your working tree once per iteration; make one change, then exit
  run: ${yamlString(options.agent)}${options.agent ? "" : "   # e.g. claude -p \"Make one failing test pass, then stop.\" --dangerously-skip-permissions"}
  timeout: 20m
`;
}

/** `loopwarden init`: writes a commented starter `loop.yaml` and keeps `.loopwarden/` out of git. */
export async function initCommand(options: OutputMode & { cwd: string; mode: string; agent?: string; contract?: string }): Promise<number> {
  if (options.mode !== "check_fixpoint") {
    throw new UserError(`mode ${options.mode} is not available yet; this version runs check_fixpoint loops (see the README roadmap)`, 2);
  }
  const repo = await repoRoot(options.cwd);
  const file = path.resolve(repo, options.contract ?? "loop.yaml");
  const shown = path.relative(repo, file);
  if (existsSync(file)) throw new UserError(`${shown} already exists; edit it, or remove it to start over`);
  const test = await guessTestCommand(repo);
  await writeFile(file, starterContract({ name: path.basename(repo), test, agent: options.agent ?? "" }));

  const gitignore = path.join(repo, ".gitignore");
  const ignored = await readFile(gitignore, "utf8").catch(() => "");
  const hasEntry = ignored.split("\n").some((line) => [".loopwarden", ".loopwarden/", "/.loopwarden/"].includes(line.trim()));
  if (!hasEntry) await appendFile(gitignore, `${ignored === "" || ignored.endsWith("\n") ? "" : "\n"}.loopwarden/\n`);

  const todo = [...(test ? [] : ["gates[0].run (your test command)"]), ...(options.agent ? [] : ["agent.run (your agent command)"])];
  emitResult(options, { status: "ok", contract: shown, todo }, [
    `wrote ${shown}${hasEntry ? "" : " and added .loopwarden/ to .gitignore"}`,
    ...(todo.length ? [`  fill in: ${todo.join(", ")}`] : []),
    `  then commit it (git add ${shown} .gitignore && git commit -m "Add loopwarden contract") and start: loopwarden run`,
  ]);
  return 0;
}
