import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["node_modules/", ".wrangler/", ".tmp/", "dist/", "worker/worker-configuration.d.ts", "migrations/", "examples/**/node_modules/"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_", destructuredArrayIgnorePattern: "^_" }],
      "@typescript-eslint/consistent-type-imports": "error",
      "no-console": "off",
    },
  },
  {
    // zod's `z` export is one object holding all of zod, its 40 locales among them, which no bundler can
    // prune: the namespace import lets esbuild keep only the schemas used (the worker bundle 1.9 → 1.15 MB,
    // the receipt page's verifier 583 → 224 KB, issue 30). Tests are never bundled.
    files: ["shared/**/*.ts", "worker/**/*.ts", "runner/**/*.ts", "scripts/**/*.ts"],
    rules: {
      "no-restricted-syntax": [
        "error",
        {
          selector: "ImportDeclaration[source.value='zod'][importKind!='type'] > ImportSpecifier[imported.name='z']",
          message: 'import zod as a namespace (`import * as z from "zod"`): `{ z }` puts all of zod in every bundle.',
        },
      ],
    },
  },
  {
    files: ["**/*.js", "**/*.mjs"],
    languageOptions: { globals: { process: "readonly", console: "readonly", URL: "readonly" } },
  },
);
