"""The public entry points: Program, trace, dumps/loads, save/load, bind."""
