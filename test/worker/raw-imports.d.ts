// Fixture files imported as text (Vite's `?raw`), e.g. an event log of an earlier format.
declare module "*?raw" {
  const text: string;
  export default text;
}
