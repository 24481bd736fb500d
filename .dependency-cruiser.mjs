// The layers the code keeps (issue 25), checked by dependency-cruiser in `npm run lint` (`lint:layers`):
//
//   shared/wire      the wire schemas: the bottom, what everything else speaks
//   shared/…         the rest of shared/, with shared/engine (the pure decision engine) above wire
//   worker/          the Cloudflare Worker            runner/   the Node CLI
//   scripts/         the build (scripts/lib: build code the runner also uses)
//
// Every rule is an error. Type-only imports count (tsPreCompilationDeps): a cycle or a wrong way held
// only by `import type` is one all the same, and is the kind that grows unnoticed.
// test/unit/layering.test.ts shows that a wrong import fails the check.

/** @type {import('dependency-cruiser').IConfiguration} */
export default {
  forbidden: [
    {
      // shared/ is the code the worker and the runner both run: it cannot know either of them, nor the
      // build, the tests or the benchmarks, or it would drag one side's code (Node into the Worker, the
      // Worker's bindings into the CLI) into the other.
      name: "shared-not-to-its-users",
      severity: "error",
      from: { path: "^shared/" },
      to: { path: "^(worker|runner|scripts|test|bench)/" },
    },
    {
      // shared/ runs in the Worker and in the browser (the receipt page's verifier) as well as in Node:
      // no Node built-ins. Its tsconfig has "types": [] for the same reason; this catches the import itself.
      name: "shared-not-to-node-builtins",
      severity: "error",
      from: { path: "^shared/" },
      to: { dependencyTypes: ["core"] },
    },
    {
      // The wire schemas are below the engine: the engine decides over what the wire carries, and the
      // wire describes data without knowing how it is decided. An event part the API also carries is
      // defined in wire (shared/wire/event-parts.ts) and re-exported by the engine.
      name: "wire-not-to-engine",
      severity: "error",
      from: { path: "^shared/wire/" },
      to: { path: "^shared/engine/" },
    },
    {
      // Outside shared/, its modules are imported as `#shared/…` (package.json `imports`), never by a
      // relative path: one spelling for every importer, whatever its depth, and no `../shared` that reads
      // like a path out of the repository.
      name: "shared-through-its-alias",
      severity: "error",
      from: { pathNot: "^shared/" },
      to: { path: "^shared/", dependencyTypesNot: ["aliased-subpath-import"] },
    },
    {
      // The runner talks to the worker over HTTP only: what both need is in shared/. Importing the
      // worker's code would bundle Worker-only code (bindings, Durable Objects) into the CLI.
      name: "runner-not-to-worker-src",
      severity: "error",
      from: { path: "^runner/" },
      to: { path: "^worker/src/" },
    },
    {
      // The worker runs in workerd: the runner's and the build's code is Node code it cannot run.
      name: "worker-not-to-runner-or-scripts",
      severity: "error",
      from: { path: "^worker/" },
      to: { path: "^(runner|scripts)/" },
    },
    {
      // The build is below the runner: build code both use lives in scripts/lib/ (the worker bundle's
      // build, which the local coordinator also runs when its sources changed), and the runner imports it
      // from there, never the build from runner/. scripts/demo.ts is not build code but a demo that
      // drives the runner's local coordinator (as bench/ does), so it may.
      name: "build-not-to-runner",
      severity: "error",
      from: { path: "^scripts/", pathNot: "^scripts/demo\\.ts$" },
      to: { path: "^(runner|worker|test|bench)/" },
    },
    {
      // What the runner takes from the build is its library (scripts/lib/), never a build script: an
      // entry point, which may do its work when imported.
      name: "runner-only-to-scripts-lib",
      severity: "error",
      from: { path: "^runner/" },
      to: { path: "^scripts/", pathNot: "^scripts/lib/" },
    },
    {
      // No import cycles: in a cycle no module can be understood, tested or moved without the others,
      // and module initialisation order becomes an accident. Cut one by moving the type or the small
      // function both ends need to a file of its own.
      name: "no-circular",
      severity: "error",
      from: { path: "^(worker|runner|shared|scripts)/" },
      to: { circular: true },
    },
    {
      // Every import must resolve, or the rules above would silently not see it. Generated files under
      // dist/ (the receipt page's script, the bundled CLI) exist only after a build, so are left out.
      name: "not-to-unresolvable",
      severity: "error",
      from: {},
      to: { couldNotResolve: true, pathNot: "(^|/)dist/" },
    },
  ],
  options: {
    doNotFollow: { path: ["node_modules", "(^|/)dist/"] },
    // Type-only imports are dependencies too (see the top).
    tsPreCompilationDeps: true,
    // Packages are resolved through their "exports", as Node, esbuild and wrangler resolve them.
    enhancedResolveOptions: { exportsFields: ["exports"], conditionNames: ["import", "require", "node", "default", "types"] },
    // workerd's own modules, as Node's are built in.
    builtInModules: { add: ["cloudflare:workers"] },
  },
};
