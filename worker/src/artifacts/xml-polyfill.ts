import { DOMParser, Node } from "@xmldom/xmldom";

// @aws-sdk/client-s3's browser build, the one a Worker bundle gets, parses S3's XML answers with the
// DOM's `DOMParser` and reads node types off `Node`; workerd has neither (aws-sdk-js-v3 #7375). This
// module provides both from @xmldom/xmldom when it is imported: only S3 mode's storage imports it, so
// binding mode never evaluates it.

const scope = globalThis as { DOMParser?: unknown; Node?: unknown };
scope.DOMParser ??= DOMParser;
scope.Node ??= Node;
