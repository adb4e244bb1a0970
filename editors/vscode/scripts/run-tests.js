#!/usr/bin/env node
// `npm test`: run the compiled unit tests (out/test/*.test.js) with node's test runner, naming the
// files: Node 20 searches a directory argument, Node 22+ reads arguments as globs, so neither form
// works on both.
"use strict";

const fs = require("fs");
const path = require("path");
const { spawnSync } = require("child_process");

const dir = path.resolve(__dirname, "..", "out", "test");
const files = fs.existsSync(dir)
  ? fs.readdirSync(dir).filter((name) => name.endsWith(".test.js")).sort().map((name) => path.join(dir, name))
  : [];
if (files.length === 0) {
  console.error(`run-tests: no compiled tests in ${path.relative(process.cwd(), dir) || dir} (run npm run compile first)`);
  process.exit(1);
}
const run = spawnSync(process.execPath, ["--test", "--test-reporter=spec", ...files], { stdio: "inherit" });
process.exit(run.status === null ? 1 : run.status);
