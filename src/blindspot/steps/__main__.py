from blindspot.steps import main

main()
