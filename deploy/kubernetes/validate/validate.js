#!/usr/bin/env node
// Validates Kubernetes manifests offline: every YAML document of the files
// and directories given (recursively: *.yaml, *.yml) is parsed with the npm
// package `yaml` as YAML 1.1, as Kubernetes reads it (duplicate keys are
// errors), and validated against the Kubernetes API schemas that the npm
// package `kubernetes-models` bundles (types, required fields, enums and
// formats such as quantities). The schemas allow unknown fields, as the API
// server does unless told to be strict, so a misspelt optional field would
// pass them: TypeScript's excess-property check against kubernetes-models'
// own type declarations refuses those (the first one of each document). No
// cluster and no network: the packages are pinned in package-lock.json
// beside this file, and validate.sh installs them into the build directory.
//
//   node validate.js PATH...            exit 0: all valid; 1: errors, one a line
//   node validate.js --config-map FILE NAME KEY
//                                       prints data[KEY] of ConfigMap NAME in FILE
//
// kubernetes-models is found through NODE_PATH (validate.sh sets it).
"use strict";

const fs = require("fs");
const path = require("path");
const ts = require("typescript");
const YAML = require("yaml");

function yamlFiles(target) {
  const stat = fs.statSync(target);
  if (!stat.isDirectory()) return [target];
  return fs
    .readdirSync(target, { withFileTypes: true })
    .filter((entry) => entry.name !== "node_modules")
    .flatMap((entry) => {
      const full = path.join(target, entry.name);
      if (entry.isDirectory()) return yamlFiles(full);
      return /\.ya?ml$/.test(entry.name) ? [full] : [];
    })
    .sort();
}

// The documents of `file`, or a list of parse errors.
function parseDocuments(file) {
  const docs = YAML.parseAllDocuments(fs.readFileSync(file, "utf8"), {
    uniqueKeys: true,
    version: "1.1",
  });
  const errors = docs.flatMap((doc) => doc.errors.map((e) => e.message));
  return { docs: docs.map((doc) => doc.toJS()), errors };
}

// The kubernetes-models class of an object, e.g. apps/v1 DaemonSet from
// kubernetes-models/apps/v1/DaemonSet; null when the package has none.
function modelOf(apiVersion, kind) {
  if (!/^([a-z0-9.-]+\/)?v[0-9a-z]+$/.test(apiVersion) || !/^[A-Za-z]+$/.test(kind)) {
    return null;
  }
  try {
    const module = require(`kubernetes-models/${apiVersion}/${kind}`);
    return module[kind] || null;
  } catch (e) {
    if (e.code === "MODULE_NOT_FOUND") return null;
    throw e;
  }
}

// Unknown fields of `checked` ({where, name, apiVersion, kind, doc}, each
// valid against its schema): every document becomes `const dN: IKind =
// <its JSON>;` in one TypeScript source, compiled in memory (never
// written) beside node_modules so that the declarations resolve. Returns
// one problem a document at most.
function unknownFields(checked) {
  if (checked.length === 0) return [];
  const modules = (process.env.NODE_PATH || "").split(path.delimiter)[0];
  const file = path.join(path.dirname(path.resolve(modules)), "manifests.ts");
  let source = "";
  const spans = checked.map((entry, index) => {
    const module = `kubernetes-models/${entry.apiVersion}/${entry.kind}`;
    const start = source.length;
    source +=
      `import type { I${entry.kind} as T${index} } from "${module}";\n` +
      `export const d${index}: T${index} = ${JSON.stringify(entry.doc, null, 1)};\n`;
    return { start, end: source.length, entry };
  });
  const options = {
    noEmit: true,
    strict: true,
    skipLibCheck: true,
    types: [],
    lib: ["lib.es2020.d.ts"],
    module: ts.ModuleKind.CommonJS,
    moduleResolution: ts.ModuleResolutionKind.Node10,
  };
  const host = ts.createCompilerHost(options);
  const readSource = host.getSourceFile;
  host.getSourceFile = (name, version, ...rest) =>
    path.resolve(name) === file
      ? ts.createSourceFile(name, source, version)
      : readSource(name, version, ...rest);
  const program = ts.createProgram([file], options, host);
  const problems = new Map();
  for (const diagnostic of ts.getPreEmitDiagnostics(program)) {
    const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, " ");
    const span =
      diagnostic.file && path.resolve(diagnostic.file.fileName) === file
        ? spans.find((s) => diagnostic.start >= s.start && diagnostic.start < s.end)
        : undefined;
    const where = span ? `${span.entry.where} (${span.entry.name})` : "type check";
    if (!problems.has(where)) problems.set(where, `${where}: ${message}`);
  }
  return [...problems.values()];
}

function validate(targets) {
  const problems = [];
  const checked = [];
  const files = targets.flatMap(yamlFiles);
  for (const file of files) {
    const { docs, errors } = parseDocuments(file);
    for (const message of errors) problems.push(`${file}: ${message}`);
    docs.forEach((doc, index) => {
      if (doc === null || doc === undefined) return;  // an empty document
      const where = `${file}: document ${index + 1}`;
      if (typeof doc !== "object" || Array.isArray(doc)) {
        problems.push(`${where}: not a Kubernetes object (a mapping)`);
        return;
      }
      const name = `${doc.kind}/${(doc.metadata || {}).name}`;
      const Model = modelOf(String(doc.apiVersion), String(doc.kind));
      if (Model === null) {
        problems.push(
          `${where} (${name}): unknown apiVersion/kind ${doc.apiVersion} ${doc.kind}`
        );
        return;
      }
      try {
        new Model(doc).validate();
        checked.push({ where, name, apiVersion: doc.apiVersion, kind: doc.kind, doc });
      } catch (e) {
        problems.push(`${where} (${name}): ${e.message}`);
      }
    });
  }
  if (files.length === 0) problems.push(`no YAML files in ${targets.join(" ")}`);
  problems.push(...unknownFields(checked));
  for (const problem of problems) console.log(problem);
  if (problems.length > 0) return 1;
  console.log(`${checked.length} documents in ${files.length} files are valid`);
  return 0;
}

function printConfigMapKey(file, name, key) {
  const { docs, errors } = parseDocuments(file);
  if (errors.length > 0) throw new Error(`${file}: ${errors.join("; ")}`);
  const map = docs.find(
    (doc) => doc && doc.kind === "ConfigMap" && doc.metadata && doc.metadata.name === name
  );
  if (!map || !map.data || typeof map.data[key] !== "string") {
    console.error(`${file}: no ConfigMap ${name} with data key ${key}`);
    return 1;
  }
  process.stdout.write(map.data[key]);
  return 0;
}

const args = process.argv.slice(2);
if (args[0] === "--config-map" && args.length === 4) {
  process.exitCode = printConfigMapKey(args[1], args[2], args[3]);
} else if (args.length > 0 && !args[0].startsWith("-")) {
  process.exitCode = validate(args);
} else {
  console.error("usage: validate.js PATH... | --config-map FILE NAME KEY");
  process.exitCode = 2;
}
