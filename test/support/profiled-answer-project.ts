// The project the artifact tests run a loop on: answer() returns 41 where its test wants 42, and the gate
// runs the tests under `node --cpu-prof`, writing profile/unit.cpuprofile, which the contract's
// `artifacts` globs name. Each test gives the agent (as `agent.mjs`'s source) and the iteration limit.

/** The project's files, with `agent` as agent.mjs and `maxIterations` as stop.max_iterations. */
export function profiledAnswerProject(agent: string, maxIterations: number): Record<string, string> {
  return {
    "src/answer.js": "export function answer() {\n  return 41;\n}\n",
    "test/answer.test.js":
      "import assert from 'node:assert/strict';\nimport { test } from 'node:test';\nimport { answer } from '../src/answer.js';\ntest('the answer is 42', () => assert.equal(answer(), 42, 'the answer must be 42'));\n",
    "agent.mjs": agent,
    "loop.yaml": [
      "name: answer",
      "mode: check_fixpoint",
      "gates:",
      "  - name: unit",
      "    run: node --cpu-prof --cpu-prof-dir=profile --cpu-prof-name=unit.cpuprofile --test",
      "agent:",
      "  run: node agent.mjs",
      "artifacts: [profile/*.cpuprofile]",
      "stop:",
      `  max_iterations: ${maxIterations}`,
      "",
    ].join("\n"),
    ".gitignore": ".loopwarden/\nprofile/\n",
  };
}
