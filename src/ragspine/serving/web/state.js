// ragspine search page: what the page knows (libraries, documents, filters, the last search).
// Safety rule for every module of this page: every string that comes from the API or the user
// reaches the DOM through textContent, Text nodes or attribute properties, never through innerHTML
// or insertAdjacentHTML.

export const state = {
  libraries: [],            // [{name, documents, pages}]
  docs: new Map(),          // "lib\0doc" -> document entry (+ .library)
  filters: new Map(),       // field -> Map(valueKey -> raw value)
  lastRequest: null,        // the body of the last search sent
  lastSearched: null,       // the question as the last answer says it was searched (its terms are marked)
  pageModel: false,         // /readyz reports a page model: the explain toggle exists
  searchSeq: 0,
};

/** Key of a document in ``state.docs``. */
export const docKey = (lib, doc) => `${lib}\u0000${doc}`;
