from chunktape.cli import main

main()
