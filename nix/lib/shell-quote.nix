# A string as one bash word: single-quoted, each ' written as '\''.
s: "'" + builtins.replaceStrings [ "'" ] [ "'\\''" ] s + "'"
