// Validates AsyncAPI documents with the AsyncAPI Initiative's own parser (@asyncapi/parser, pinned by
// package-lock.json; `make asyncapi` installs it), with its Avro and Protobuf schema parsers registered so
// that payloads in those formats are parsed too. Usage: node validate.mjs FILE...
// Prints every diagnostic as JSON lines on stdout; exits 1 when any has error severity, 2 on bad usage.
import { readFile } from "node:fs/promises";
import { Parser, DiagnosticSeverity } from "@asyncapi/parser";
import { AvroSchemaParser } from "@asyncapi/avro-schema-parser";
import { ProtoBuffSchemaParser } from "@asyncapi/protobuf-schema-parser";

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error("usage: node validate.mjs FILE...");
  process.exit(2);
}
const parser = new Parser({ schemaParsers: [AvroSchemaParser(), ProtoBuffSchemaParser()] });
let errors = 0;
for (const file of files) {
  const source = await readFile(file, "utf8");
  const { document, diagnostics } = await parser.parse(source, { source: file });
  for (const d of diagnostics) {
    const severity = Object.keys(DiagnosticSeverity).find((k) => DiagnosticSeverity[k] === d.severity);
    console.log(JSON.stringify({ file, severity, code: d.code, path: d.path, message: d.message }));
    if (d.severity === DiagnosticSeverity.Error) errors += 1;
  }
  if (document === undefined && errors === 0) {
    console.log(JSON.stringify({ file, severity: "Error", message: "the parser returned no document" }));
    errors += 1;
  }
}
process.exit(errors > 0 ? 1 : 0);
