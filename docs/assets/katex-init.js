// Render the math that pymdownx.arithmatex (generic mode) leaves in the page,
// with the vendored KaTeX: no network access at view time. Material's
// document$ fires on every page load, including instant navigation.
document$.subscribe(({ body }) => {
  renderMathInElement(body, {
    delimiters: [
      { left: "$$", right: "$$", display: true },
      { left: "$", right: "$", display: false },
      { left: "\\(", right: "\\)", display: false },
      { left: "\\[", right: "\\]", display: true },
    ],
  });
});
