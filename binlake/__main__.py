from binlake.cli import main

main()
